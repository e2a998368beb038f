"""The job uid range against the host's subordinate ids (/etc/subuid, /etc/subgid): a host user's
rootless containers run as those, so a job uid among them would be that user's too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from launcher import uids
from launcher.paths import Refused
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the root launcher checks the range")


def subids(tmp_path: Path, subuid: str = "", subgid: str = "") -> tuple[Path, Path]:
    (tmp_path / "subuid").write_text(subuid)
    (tmp_path / "subgid").write_text(subgid)
    return tmp_path / "subuid", tmp_path / "subgid"


def test_a_range_overlapping_a_subordinate_range_is_refused_naming_its_owner(tmp_path, monkeypatch):
    # Debian's useradd hands its first users 100000-165535, then 165536-231071: the old default
    # 200000-265535 lay across the second.
    files = subids(tmp_path, "alice:100000:65536\nbob:165536:65536\n")
    monkeypatch.setattr(uids, "SUBID_FILES", files, raising=False)
    with pytest.raises(Refused, match=r"overlaps 165536-231071, the subordinate ids .*subuid gives 'bob'"):
        uids.check_host(range(200000, 265536))
    with pytest.raises(Refused, match="gives 'alice'"):  # one id in common is enough
        uids.check_host(range(165535, 165536))


def test_subgid_ranges_count_too_job_uids_are_their_gids(tmp_path, monkeypatch):
    monkeypatch.setattr(uids, "SUBID_FILES", subids(tmp_path, subgid="1000:300000:65536\n"), raising=False)
    with pytest.raises(Refused, match=r"overlaps 300000-365535, the subordinate ids .*subgid gives '1000'"):
        uids.check_host(range(365535, 400000))


def test_a_range_beside_every_subordinate_range_is_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(uids, "SUBID_FILES", subids(tmp_path, "alice:100000:65536\n", "alice:300000:65536\n"),
                        raising=False)
    uids.check_host(range(165536, 300000))  # ends just before the subgid range, starts just after the subuid one
    uids.check_host(range(365536, 400000))


def test_comments_malformed_lines_and_missing_files_are_skipped(tmp_path, monkeypatch):
    text = ("# alice:200000:65536\n\n  \nbroken line\nx:200000\nx:200000:-5\nx:-1:65536\nx:2e5:10\n"
            "x:200000:0\nx:200000:abc\n:200000:10\nx:200000:10:extra\nx: 200000:10\n")
    monkeypatch.setattr(uids, "SUBID_FILES", (*subids(tmp_path, text, text), tmp_path / "missing"), raising=False)
    uids.check_host(range(200000, 265536))
    assert list(uids.subordinate(subids(tmp_path, text + "  carol:200005:1  \n"))) == [
        (tmp_path / "subuid", "carol", range(200005, 200006))]


def test_an_unreadable_file_refuses_rather_than_passing_unchecked(tmp_path, monkeypatch):
    (tmp_path / "subuid").mkdir()  # read as a file: EISDIR
    monkeypatch.setattr(uids, "SUBID_FILES", (tmp_path / "subuid",), raising=False)
    with pytest.raises(Refused, match="cannot read"):
        uids.check_host(range(200000, 265536))


def test_the_default_range_lies_where_no_normal_host_hands_ids_out():
    first, last = (int(v) for v in uids.DEFAULT.split("-"))
    assert uids.parse(uids.DEFAULT) == range(first, last + 1) and last - first + 1 == 65536
    assert first > 600_100_000  # login.defs' SUB_UID_MAX, SUB_GID_MAX: useradd allocates below it
    assert first > 1_879_048_191  # systemd's container (nspawn) ranges; LXD's 1000000-1000999999
    assert last < 2**31 - 1  # signed 32-bit trouble above
    assert first & 0xFFFF == 0  # a 64K-aligned block, as container managers allocate them
    # The same default where the launcher and the service each name it.
    settings_py = (REPO / "paddleweb" / "settings.py").read_text()
    assert re.search(r'JOB_UIDS = env\.str\("JOB_UIDS", "([0-9-]+)"\)', settings_py)[1] == uids.DEFAULT
    from launcher.__main__ import parse

    roots = [a for name in ("pfs", "jobs", "logs", "venvs") for a in (f"--{name}-root", "/x")]
    assert parse(["--socket", "/x", "--state-dir", "/x", *roots]).job_uids == uids.DEFAULT


@as_root
def test_a_real_launcher_does_not_start_on_a_range_a_host_user_holds_subordinate(tmp_path):
    files = subids(tmp_path, "alice:100000:65536\nbob:165536:65536\n")
    base = Path(tempfile.mkdtemp(prefix="launcher-subid-"))
    for name in ("pfs", "jobs", "logs", "venvs"):
        (base / name).mkdir()
    roots = [a for name in ("pfs", "jobs", "logs", "venvs") for a in (f"--{name}-root", str(base / name))]
    argv = ["--socket", str(base / "launcher.sock"), "--state-dir", str(base / "state"), "--job-uids", "200000-265535",
            "--uid-registry", str(base / "uid-registry"), *roots]
    # The launcher itself, but for the files it reads subordinate ids from (no switch of its own:
    # a root process should not take such paths from its environment).
    code = ("import sys; from pathlib import Path; from launcher import uids, __main__ as m; "
            f"uids.SUBID_FILES = (Path({str(files[0])!r}), Path({str(files[1])!r})); sys.exit(m.main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: proc.poll() is not None or (base / "launcher.sock").exists(), 30)
        assert proc.poll() == 2, "it started on a range a host user's containers run as"
        output = proc.stdout.read()
        assert "not starting: JOB_UIDS 200000-265535 overlaps 165536-231071" in output and "'bob'" in output, output
        assert not (base / "uid-registry" / "200000-265535").exists()  # refused before registering it
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(30)
        proc.stdout.close()
        subprocess.run(["rm", "-rf", str(base)], check=False)
