"""Partial data lives outside the home (pfs.storage.scratch_fd), so a job that shapes its home's
`.uploads` (the name it once had there) as it likes, links, FIFOs or a held `.lock` included,
has no effect on uploads at all: they complete, nothing waits, nothing is refused; and what
the job stores there is the user's data like any other, counted against the quota."""

import fcntl
import os
import stat
import time

import pytest

from pfs import storage, usage

from .conftest import scratch

A = "/pfs/local/home/alice"
OCTETS = "application/offset+octet-stream"


def create(api, path, size, **extra):
    r = api.post("/api/v2/uploads/", {"path": path, "size": size, **extra}, format="json")
    assert r.status_code == 201, r.content
    return r.json()["id"]


def patch(api, upload_id, offset, data, **headers):
    return api.generic("PATCH", f"/api/v2/uploads/{upload_id}/", data, content_type=OCTETS,
                       HTTP_UPLOAD_OFFSET=str(offset), **headers)


@pytest.fixture
def bobs_file(settings, bob):
    bobs = settings.PFS_ROOT / "local/home/bob"
    bobs.mkdir(parents=True)
    (bobs / "secret").write_bytes(b"bob's")
    return bobs / "secret"


def test_parts_live_in_a_service_only_directory_outside_the_home(alice_api, home_dir):
    uid = create(alice_api, f"{A}/f.bin", 10)
    assert patch(alice_api, uid, 0, b"01234").status_code == 200
    part = scratch(home_dir) / f"{uid}.part"
    assert part.read_bytes() == b"01234"
    assert not part.resolve().is_relative_to(home_dir.resolve())
    assert stat.S_IMODE(scratch(home_dir).stat().st_mode) == 0o700
    assert os.listdir(home_dir) == []  # nothing of the upload's in the home


@pytest.mark.parametrize("made", ["a link to bob's home", "a directory with a FIFO named like the part",
                                  "a file", "a dangling link"])
def test_whatever_a_job_makes_of_uploads_in_its_home_uploads_complete(alice_api, home_dir, bobs_file, made):
    uid = create(alice_api, f"{A}/f.bin", 10)
    assert patch(alice_api, uid, 0, b"01234").status_code == 200
    job_made = home_dir / ".uploads"
    if made == "a link to bob's home":
        os.symlink(bobs_file.parent, job_made)
        os.symlink(bobs_file, bobs_file.parent / f"{uid}.part")
    elif made.startswith("a directory"):
        job_made.mkdir()
        os.mkfifo(job_made / f"{uid}.part")
        (job_made / ".lock").mkdir()
    elif made == "a file":
        job_made.write_bytes(b"")
    else:
        os.symlink("/nowhere", job_made)
    r = patch(alice_api, uid, 5, b"56789")
    assert r.status_code == 200 and r.json()["complete"] is True, r.content
    assert (home_dir / "f.bin").read_bytes() == b"0123456789" and bobs_file.read_bytes() == b"bob's"
    r = alice_api.put(f"/api/v2/files/content/?path={A}/g.bin", data=b"hello", content_type="application/octet-stream")
    assert r.status_code in (200, 201) and (home_dir / "g.bin").read_bytes() == b"hello", r.content
    assert os.path.lexists(job_made)  # the job's entry is left as it made it


def test_a_lock_a_job_holds_in_its_home_holds_up_nothing(alice_api, home_dir):
    uid = create(alice_api, f"{A}/f.bin", 5)
    (home_dir / ".uploads").mkdir()
    held = os.open(home_dir / ".uploads/.lock", os.O_RDWR | os.O_CREAT)  # as the job would, from its sandbox
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        began = time.monotonic()
        r = patch(alice_api, uid, 0, b"01234")
        assert r.status_code == 200 and r.json()["complete"] is True, r.content
        r = alice_api.put(f"/api/v2/files/content/?path={A}/g.bin", data=b"hi", content_type="application/octet-stream")
        assert r.status_code in (200, 201), r.content
        assert time.monotonic() - began < storage.LOCK_WAIT / 2
    finally:
        os.close(held)
    assert (home_dir / "f.bin").read_bytes() == b"01234" and (home_dir / "g.bin").read_bytes() == b"hi"


def test_what_a_job_stores_in_uploads_counts_like_any_other_data(alice, datacenter, alice_api, home_dir):
    (home_dir / "visible").write_bytes(b"v" * 100)
    uid = create(alice_api, f"{A}/f.bin", 1000)
    assert patch(alice_api, uid, 0, b"p" * 400).status_code == 200
    assert usage.recompute(alice, datacenter) == 100  # the service's part: reserved, not counted
    (home_dir / ".uploads").mkdir()
    (home_dir / ".uploads/stash").write_bytes(b"s" * 5000)  # the job's
    (home_dir / ".uploads" / f"{uid}.part").write_bytes(b"x" * 700)  # named like a part: still the job's
    assert usage.recompute(alice, datacenter) == 5800
    assert usage.get_usage(alice, "local").reserved_bytes == 1000  # the upload's room, unchanged


def test_a_file_named_uploads_counts_against_its_quota(alice, datacenter, home_dir):
    (home_dir / ".uploads").write_bytes(b"s" * 7000)
    assert usage.recompute(alice, datacenter) == 7000


def test_an_upload_started_before_parts_moved_out_of_homes_is_reported_gone(alice, alice_api, home_dir):
    uid = create(alice_api, f"{A}/f.bin", 10)
    (scratch(home_dir) / f"{uid}.part").unlink()  # as for an upload whose part is still in `<home>/.uploads`
    assert alice_api.get(f"/api/v2/uploads/{uid}/").json()["offset"] == 0
    r = patch(alice_api, uid, 0, b"0123456789")
    assert r.status_code == 410 and "start a new upload" in r.json()["detail"], r.content
    assert alice_api.delete(f"/api/v2/uploads/{uid}/").status_code == 204
    assert usage.get_usage(alice, "local").reserved_bytes == 0
