"""Requests a compromised web process could send the launcher, which must refuse them itself: the
service's account owns the job directories the requests name, so it can put anything there."""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path

import pytest

from launcher.ops import Launcher, Setup
from launcher.paths import Refused, Roots
from tests.support import ROOT

DEADLINE = 60  # seconds a refusal may take on a busy machine; a blocked request takes for ever


@pytest.fixture
def launcher(tmp_path):
    for name in ("pfs/local/home/alice", "pfs/local/public", "jobs/j1/trainer-0/state", "jobs/j1/trainer-0/work",
                 "jobs/j1/trainer-0/tmp", "logs", "venvs/v1/bin"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "logs" / "j1.log").touch()
    roots = Roots(**{name: str(tmp_path / name) for name in ("pfs", "jobs", "logs", "venvs")})
    return Launcher(Setup(roots, tmp_path / "state", os.geteuid(), range(300000, 300101) if ROOT else None,
                          rootless=not ROOT))


def replica(base: Path, **changed: object) -> dict:
    r = base / "jobs" / "j1" / "trainer-0"
    return {"op": "start_replica", "job": 910001, "replica": "trainer-0", "uid": 300001, "memory_bytes": 1 << 30,
            "cpu_millis": 1000, "pids": 64, "disk_bytes": 1 << 30, "grace": 1, "hostname": "h", "username": "alice",
            "home": str(base / "pfs/local/home/alice"), "home_at": "/pfs/local/home/alice",
            "public": str(base / "pfs/local/public"), "public_at": "/pfs/local/public",
            "argv": ["/bin/true"], "env": {"PATH": "/usr/bin:/bin"}, "state": str(r / "state"),
            "log": str(base / "logs" / "j1.log"), "work": str(r / "work"), "tmp": str(r / "tmp"),
            "venv": str(base / "venvs" / "v1"), **changed}


def within_deadline(call):
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(DEADLINE)
    finally:
        pool.shutdown(wait=False)


def test_a_mount_point_inside_another_replica_directory_is_refused(launcher, tmp_path):
    # bwrap would make the inner mount point inside the home, following the link the job left there.
    host = tmp_path / "host-side"
    host.mkdir()
    (tmp_path / "pfs/local/home/alice/x").symlink_to(f"/oldroot{host}")
    for public_at in ("/pfs/local/home/alice/x/made", "/pfs/local/home/alice"):
        with pytest.raises(Refused, match="must lie apart"):
            launcher.handle(replica(tmp_path, public_at=public_at))
    with pytest.raises(Refused, match="must lie apart"):
        launcher.handle(replica(tmp_path, home_at="/pfs/local/public/alice"))
    assert list(host.iterdir()) == []


def test_a_fifo_or_a_huge_file_for_a_keepers_pid_is_answered_at_once(launcher, tmp_path):
    state = tmp_path / "jobs/j1/trainer-0/state"
    os.mkfifo(state / "keeper.pid")  # opening it to read would wait for a writer
    assert within_deadline(lambda: launcher.handle({"op": "stop_replica", "state": str(state)})) is False
    (state / "keeper.pid").unlink()
    with open(state / "keeper.pid", "wb") as f:  # read whole, a terabyte of zeros
        f.truncate(1 << 40)
    assert within_deadline(lambda: launcher.handle({"op": "stop_replica", "state": str(state)})) is False


def test_a_fifo_for_a_log_is_refused_at_once(launcher, tmp_path):
    (tmp_path / "logs" / "j1.log").unlink()
    os.mkfifo(tmp_path / "logs" / "j1.log")  # opening it to write would wait for a reader

    def start() -> str:
        try:
            launcher.handle(replica(tmp_path))
        except Refused as e:
            return str(e)
        return "started"

    assert "j1.log" in within_deadline(start)


def test_a_pid_file_naming_a_process_that_is_no_keeper_is_refused_and_nothing_signalled(launcher, tmp_path):
    import subprocess

    state = tmp_path / "jobs/j1/trainer-0/state"
    other = subprocess.Popen(["sleep", "600"])  # this launcher's uid, but not a keeper of that label
    try:
        (state / "keeper.pid").write_text(str(other.pid))
        with pytest.raises(Refused, match="is not the keeper"):
            launcher.handle({"op": "stop_replica", "state": str(state)})
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
    # Ended: nothing to stop.
    assert launcher.handle({"op": "stop_replica", "state": str(state)}) is False
