"""A job's package is copied once, when the job starts (snapshot_package), from its user's home,
which a running job of the same user changes at will meanwhile."""

import os
import threading

import pytest

from accounts.models import Datacenter
from jobs import services
from jobs.backends.base import LaunchError, checkpoint_path, snapshot_package
from jobs.live import logstore
from jobs.models import Job
from jobs.tests.test_local_backend import run_until_done
from pfs import storage
from pfs.paths import home
from tests.support import deep_chain, make_package

pytestmark = pytest.mark.django_db


def unsaved_job(user, name: str, package: str) -> Job:
    return Job(user=user, name=name, package=package, datacenter=Datacenter.objects.get(name="local"))


def test_a_directory_swapped_for_a_link_while_the_package_is_copied_never_copies_what_it_points_to(
        alice, bob, tmp_path):
    secret = home(bob, "local").disk / "secret"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("bob's")
    files = {"train.py": "", **{f"d/f{i}": "" for i in range(20)}}
    job = unsaved_job(alice, "snap", make_package(alice, "snap", files))
    package = home(alice, "local").child("jobs", "snap").disk
    stop = threading.Event()

    def swap() -> None:  # what alice's running job does in her home, as fast as it can
        d, aside, link = package / "d", package / "d.aside", package / "d.link"
        os.symlink(secret.parent, link)
        while not stop.is_set():
            os.rename(d, aside)
            os.rename(link, d)  # d: a link to bob's home
            os.rename(d, link)
            os.rename(aside, d)  # d: alice's directory again

    threading.Thread(target=swap, daemon=True).start()
    whole = 0
    try:
        for attempt in range(300):
            dest = tmp_path / str(attempt)
            try:
                snapshot_package(job, dest)
            except LaunchError:
                continue  # the package itself was away at that moment: the job says so
            assert not list(dest.rglob("secret")), attempt
            whole += (dest / "train.py").exists()
    finally:
        stop.set()
    assert whole


def test_links_hard_links_special_files_and_checkpoints_are_left_out_of_the_copy(alice, tmp_path):
    job = unsaved_job(alice, "odd", make_package(alice, "odd", {"train.py": "print(1)", "data/a.txt": "a"}))
    package = home(alice, "local").child("jobs", "odd").disk
    os.symlink("/etc/passwd", package / "passwd")
    os.symlink("data", package / "data.link")
    os.link(package / "data" / "a.txt", package / "hard.txt")
    os.mkfifo(package / "fifo")
    checkpoints = checkpoint_path(job).disk
    checkpoints.mkdir(parents=True)
    (checkpoints / "step-1").write_text("weights")

    snapshot_package(job, tmp_path / "package")

    copied = sorted(str(p.relative_to(tmp_path / "package")) for p in (tmp_path / "package").rglob("*"))
    assert copied == ["data", "train.py"]  # a.txt has two names now (hard.txt): neither is copied
    assert (tmp_path / "package" / "train.py").read_text() == "print(1)"


def test_the_copy_keeps_the_modes_of_the_package_and_its_files(alice, tmp_path):
    job = unsaved_job(alice, "modes", make_package(alice, "modes", {"run.sh": "", "lib/x.py": ""}))
    package = home(alice, "local").child("jobs", "modes").disk
    for path, mode in [(package, 0o751), (package / "lib", 0o750), (package / "run.sh", 0o755)]:
        os.chmod(path, mode)

    snapshot_package(job, tmp_path / "package")

    copy = tmp_path / "package"
    assert [oct(p.stat().st_mode & 0o777) for p in (copy, copy / "lib", copy / "run.sh")] == ["0o751", "0o750", "0o755"]


def test_a_package_that_is_a_file_or_leads_outside_the_home_does_not_start(alice, bob, tmp_path):
    make_package(bob, "theirs", {"train.py": ""})
    make_package(alice, "file", {"x": ""})
    os.symlink(home(bob, "local").child("jobs", "theirs").disk, home(alice, "local").disk / "jobs" / "theirs")
    for package, says in [("/pfs/local/home/alice/jobs/theirs", "outside your storage"),
                          ("/pfs/local/home/alice/jobs/file/x", "not a directory")]:
        with pytest.raises(LaunchError) as e:
            snapshot_package(unsaved_job(alice, "p", package), tmp_path / "package")
        assert e.value.reason == "PackageUnavailable" and says in e.value.message
        assert not (tmp_path / "package").exists()


def test_a_package_deeper_than_a_copy_goes_does_not_start(alice, tmp_path):
    pkg = make_package(alice, "deep", {"train.py": ""})
    chain = home(alice, "local").child("jobs", "deep", "d").disk
    with deep_chain(chain, depth=storage.MAX_COPY_DEPTH), pytest.raises(LaunchError) as e:
        snapshot_package(unsaved_job(alice, "deep", pkg), tmp_path / "package")
    assert e.value.reason == "PackageUnavailable" and "levels deep" in e.value.message
    assert not (tmp_path / "package").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("no_job_left_behind")
def test_a_requirements_file_linked_to_another_users_file_is_never_read_for_the_job(alice, bob):
    """The service reads requirements.txt from the copy to build the job's runtime: were a link
    copied, it would read whatever the link names, as the service, and show it in the build log."""
    secret = home(bob, "local").disk / "secret.txt"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("bobs-private-line\n")
    pkg = make_package(alice, "reqlink", {"train.py": "print('ran')"})
    os.symlink(secret, home(alice, "local").child("jobs", "reqlink").disk / "requirements.txt")

    job = run_until_done(services.submit_job(alice, {"name": "reqlink", "package": pkg, "entry": "python train.py",
                                                     "mode": "collective", "trainers": 1}))

    assert job.state == "Succeeded", job.message
    shown = [job.message, *job.events.values_list("message", flat=True), logstore.read(logstore.build_log(job)).text,
             logstore.read(job.replicas.get()).text]
    assert not [text for text in shown if "bobs-private" in text]
