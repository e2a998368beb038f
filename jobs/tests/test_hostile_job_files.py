"""What a job (or its runtime build) leaves in what it can write, as the service then touches it:
a link, a hard link or a deep tree is never followed, written through or handed over."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from accounts.models import Datacenter
from jobs.backends.base import LaunchError, snapshot_package
from jobs.backends.local import runtime
from jobs.models import Job
from jobs.submission import validation
from pfs.paths import PfsPath, home
from quotas.models import Quota
from tests.support import deep_chain, make_package


@pytest.mark.django_db
def test_a_link_a_runtime_build_leaves_as_its_ready_marker_is_replaced_never_written_through(
        alice, bob, settings, monkeypatch, tmp_path):
    settings.VENVS_ROOT = tmp_path / "venvs"
    bobs = home(bob, "local").disk
    bobs.mkdir(parents=True)
    planted = bobs / "planted-by-a-build"

    def hostile_pip(target: Path, log_path: Path, heartbeat: object) -> int:
        # A package's setup script writes the virtualenv it installs into, as the build uid.
        os.symlink(planted, target / runtime.READY)
        return 0

    monkeypatch.setattr(runtime, "_sandboxed_pip", hostile_pip)
    bin_dir = runtime.ensure_env(f"hostile-{os.getpid()}\n", sandboxed=True)
    assert not os.path.lexists(planted)  # the service made no file in bob's home
    assert stat.S_ISREG((bin_dir.parent / runtime.READY).lstat().st_mode)


@pytest.mark.django_db
def test_a_package_swapped_for_a_link_after_its_check_does_not_tell_whether_bob_has_a_directory(
        alice, bob, datacenter, monkeypatch):
    secret = home(bob, "local").disk / "secret-project"
    secret.mkdir(parents=True)
    package = make_package(alice, "p", {"train.py": "print(1)\n"})
    checked = PfsPath.ensure_contained

    def then_swapped(self: PfsPath) -> Path:
        real = checked(self)
        if self.owner == "alice" and self.parts[-1:] == ("p",):  # alice's job wins the race
            self.disk.rename(self.disk.with_name("p-away"))
            self.disk.symlink_to(secret)
        return real

    monkeypatch.setattr(PfsPath, "ensure_contained", then_swapped)
    s = validation.Submission(alice, data={"package": package, "datacenter": datacenter})
    validation.package_is_a_directory(s)
    assert "package" in s.errors  # refused as a link would be, whether bob's directory exists or not


@pytest.mark.skipif(os.geteuid() != 0, reason="handing the state directory over runs as root")
def test_handing_var_over_leaves_a_hard_linked_outside_file_alone_and_passes_a_deep_tree(tmp_path):
    from paddleweb.privileges import hand_over

    var = tmp_path / "var"
    alices = var / "pfs" / "local" / "home" / "alice"
    outside = tmp_path / "root-only"
    outside.write_text("root's")
    account = pwd.getpwnam("nobody")
    with deep_chain(alices / "deep", leaf=b"x"):
        os.link(outside, alices / "linked")  # a job's hard link to a file of root's
        hand_over(var, account)
        assert outside.stat().st_uid == 0
        assert (alices / "deep").stat().st_uid == account.pw_uid


@pytest.mark.django_db
def test_a_sparse_file_a_job_makes_in_the_package_is_not_copied_past_its_owners_quota(alice, tmp_path):
    Quota.objects.create(datacenter=Datacenter.objects.get(name="local"), user=alice, storage_bytes=1 << 20)
    package = make_package(alice, "sparse", {"train.py": "print(1)\n"})
    huge = home(alice, "local").child("jobs", "sparse", "huge").disk
    with open(huge, "wb") as f:  # what a running job of alice's does in no time, at no cost on disk
        f.truncate(8 << 20)  # as well 1 TiB
    job = Job(user=alice, name="sparse", package=package, datacenter=Datacenter.objects.get(name="local"))
    with pytest.raises(LaunchError) as e:  # never its apparent size in zeros on the service's disk
        snapshot_package(job, tmp_path / "package")
    assert e.value.reason == "PackageTooLarge"
    assert not (tmp_path / "package").exists() and not (tmp_path / "package.tmp").exists()
