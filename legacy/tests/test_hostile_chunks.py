"""The v1 client's `touch` and chunks while a job shapes its home's `.uploads` (the name partial
data once had there) as it likes: the lock file the server uses is outside the home, so a
`.lock` the job replaced or holds there changes nothing, and nothing waits."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from pfs import storage

from . import recorded as rec
from .test_chunk_upload import A, MiB


@pytest.fixture
def touched(old_client, alice, settings):
    c = old_client(alice)
    c.replay(rec.TOUCH, size=MiB, path=f"{A}/t.bin")
    home = settings.PFS_ROOT / "local/home/alice"
    (home / ".uploads").mkdir(exist_ok=True)
    return c, home


@pytest.mark.parametrize("lock", ["a link", "a directory"])
def test_a_lock_file_a_job_replaced_changes_nothing(touched, lock):
    c, home = touched
    if lock == "a link":
        os.symlink("/etc/passwd", home / ".uploads/.lock")
    else:
        (home / ".uploads/.lock").mkdir()
    r = c.upload_chunk(f"{A}/t.bin", 0, b"x" * 4096, 4096)
    assert r.json() == {"err": "", "results": {"offset": 0, "len": 4096}}, r.text
    r = c.send("POST", "/api/v1/pfs/files", json={"method": "touch", "filesize": 10, "path": f"{A}/t.bin"})
    assert r.status_code == 200 and (home / "t.bin").stat().st_size == 10, r.text


def test_a_lock_a_job_holds_holds_up_no_chunk(touched):
    c, home = touched
    held = os.open(home / ".uploads/.lock", os.O_RDWR | os.O_CREAT)  # as the job would, from its sandbox
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        began = time.monotonic()
        r = c.upload_chunk(f"{A}/t.bin", 0, b"x" * 4096, 4096)
        assert time.monotonic() - began < storage.LOCK_WAIT / 2
    finally:
        os.close(held)
    assert r.json() == {"err": "", "results": {"offset": 0, "len": 4096}}, r.text
    assert (home / "t.bin").read_bytes()[:4096] == b"x" * 4096
