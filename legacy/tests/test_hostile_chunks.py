"""The v1 client's `touch` and chunks while a job tampers with its home's `.uploads`: a lock
file it replaced or holds gets the protocol's refusal, never a 500 or a server thread held."""

from __future__ import annotations

import fcntl
import os

import pytest

from pfs import storage

from . import recorded as rec
from .test_chunk_upload import A, MiB


@pytest.fixture
def touched(old_client, alice, settings):
    c = old_client(alice)
    c.replay(rec.TOUCH, size=MiB, path=f"{A}/t.bin")
    return c, settings.PFS_ROOT / "local/home/alice"


@pytest.mark.parametrize("lock", ["a link", "a directory"])
def test_a_lock_file_a_job_replaced_refuses_touch_and_chunks(touched, lock):
    c, home = touched
    (home / ".uploads/.lock").unlink(missing_ok=True)
    if lock == "a link":
        os.symlink("/etc/passwd", home / ".uploads/.lock")
    else:
        (home / ".uploads/.lock").mkdir()
    r = c.upload_chunk(f"{A}/t.bin", 0, b"x" * 4096, 4096)
    assert r.status_code == 200 and ".lock" in r.json()["err"], r.text
    r = c.send("POST", "/api/v1/pfs/files", json={"method": "touch", "filesize": 10, "path": f"{A}/t.bin"})
    assert r.status_code < 500 and ".lock" in r.text, r.text
    assert (home / "t.bin").stat().st_size == MiB and not (home / "t.bin").read_bytes().strip(b"\0")


def test_a_lock_a_job_holds_gets_a_refusal_not_a_server_thread_held(touched, monkeypatch):
    monkeypatch.setattr(storage, "LOCK_WAIT", 0.2)
    c, home = touched
    held = os.open(home / ".uploads/.lock", os.O_RDWR | os.O_CREAT)  # as the job would, from its sandbox
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = c.upload_chunk(f"{A}/t.bin", 0, b"x" * 4096, 4096)  # the client's timeout is 60 s
    finally:
        os.close(held)
    assert r.status_code == 200 and ".lock" in r.json()["err"], r.text
    r = c.upload_chunk(f"{A}/t.bin", 0, b"x" * 4096, 4096)
    assert r.json() == {"err": "", "results": {"offset": 0, "len": 4096}}
