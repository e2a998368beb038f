"""A job racing the service over its home's `.uploads`: it can swap, link, fill or lock what
is there at any moment. The service never follows a link out, never waits on what a job
holds, answers 4xx (never a 500), and what a job stores there counts against its quota."""

import fcntl
import os
import threading

import pytest
from django.db import connection

from pfs import storage, uploads, usage
from pfs.models import StorageReservation, UploadSession

A = "/pfs/local/home/alice"
OCTETS = "application/offset+octet-stream"
DEADLINE = 20.0  # seconds a refused request may take at most (LOCK_WAIT is cut to 0.2 below)


def create(api, path, size, **extra):
    r = api.post("/api/v2/uploads/", {"path": path, "size": size, **extra}, format="json")
    assert r.status_code == 201, r.content
    return r.json()["id"]


def patch(api, upload_id, offset, data, **headers):
    return api.generic("PATCH", f"/api/v2/uploads/{upload_id}/", data, content_type=OCTETS,
                       HTTP_UPLOAD_OFFSET=str(offset), **headers)


def in_thread(call):
    """Run `call` in a thread; (thread, box): box["answer"] holds its result when it ends."""
    box = {}

    def run() -> None:
        try:
            box["answer"] = call()
        finally:  # the thread's own: back to the pool, or later tests in this process run short
            connection.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


@pytest.fixture
def bobs_file(settings, bob):
    bobs = settings.PFS_ROOT / "local/home/bob"
    bobs.mkdir(parents=True)
    (bobs / "secret").write_bytes(b"bob's")
    return bobs / "secret"


@pytest.mark.parametrize("swap", ["a link to bob's file", "a directory", "a FIFO", "a hard link the job keeps"])
def test_a_part_a_job_swapped_is_refused_never_followed_and_its_room_freed_on_cancel(
        transactional_db, alice, alice_api, home_dir, bobs_file, swap):
    uid = create(alice_api, f"{A}/f.bin", 10)
    part = home_dir / ".uploads" / f"{uid}.part"
    if swap == "a hard link the job keeps":
        os.link(part, home_dir / "keep")
    else:
        part.unlink()
        if swap == "a link to bob's file":
            os.symlink(bobs_file, part)
        elif swap == "a directory":
            part.mkdir()
        else:
            os.mkfifo(part)
    t, box = in_thread(lambda: patch(alice_api, uid, 0, b"0123456789"))
    t.join(DEADLINE)
    assert not t.is_alive(), "the server waits on what the job put there"
    r = box["answer"]
    assert r.status_code == 409 and "replaced" in r.json()["detail"], r.content
    assert bobs_file.read_bytes() == b"bob's"
    assert not (home_dir / "f.bin").exists()
    assert alice_api.get(f"/api/v2/uploads/{uid}/").status_code == 200  # a plain answer, whatever is there
    assert alice_api.delete(f"/api/v2/uploads/{uid}/").status_code == 204
    assert usage.get_usage(alice, "local").reserved_bytes == 0


def test_uploads_swapped_for_a_link_to_bobs_uploads_mid_upload_is_refused(alice, alice_api, home_dir, bobs_file):
    uid = create(alice_api, f"{A}/f.bin", 10)
    assert patch(alice_api, uid, 0, b"01234").status_code == 200
    bobs_uploads = bobs_file.parent / ".uploads"
    os.rename(home_dir / ".uploads", bobs_uploads)  # bob's scratch now holds a part named like alice's
    os.symlink(bobs_uploads, home_dir / ".uploads")
    r = patch(alice_api, uid, 5, b"56789")
    assert r.status_code == 403 and "'.uploads' in your home is not a directory" in r.json()["detail"]
    assert (bobs_uploads / f"{uid}.part").read_bytes() == b"01234"
    assert not (home_dir / "f.bin").exists() and bobs_file.read_bytes() == b"bob's"


def test_a_part_swapped_for_a_fifo_as_the_last_chunk_completes_is_answered_not_waited_on(
        transactional_db, alice_api, home_dir, monkeypatch):
    uid = create(alice_api, f"{A}/f.bin", 10)
    part = home_dir / ".uploads" / f"{uid}.part"
    real = uploads._complete

    def swapped_first(session):  # the job's move, between the chunk's checks and completion
        part.unlink()
        os.mkfifo(part)
        return real(session)

    monkeypatch.setattr(uploads, "_complete", swapped_first)
    t, box = in_thread(lambda: patch(alice_api, uid, 0, b"0123456789"))
    t.join(DEADLINE)
    stuck = t.is_alive()
    if stuck:  # let the server's thread go: a writer opens the FIFO it waits on
        os.close(os.open(part, os.O_WRONLY | os.O_NONBLOCK))
        t.join(DEADLINE)
    assert not stuck, "completion waited on a FIFO the job put in place of the part"
    assert box["answer"].status_code == 409, box["answer"].content
    assert not (home_dir / "f.bin").exists()


def test_a_part_swapped_for_a_directory_just_before_it_is_renamed_into_place_is_a_409(
        alice, alice_api, home_dir, monkeypatch):
    (home_dir / "f.bin").write_bytes(b"old")
    uid = create(alice_api, f"{A}/f.bin", 10)
    part = home_dir / ".uploads" / f"{uid}.part"
    real = uploads.put_in_place

    def swapped_first(*args, **kwargs):  # the job's move, after the part was verified
        part.unlink()
        part.mkdir()
        return real(*args, **kwargs)

    monkeypatch.setattr(uploads, "put_in_place", swapped_first)
    r = patch(alice_api, uid, 0, b"0123456789")
    assert r.status_code == 409 and "replaced" in r.json()["detail"], r.content
    assert (home_dir / "f.bin").read_bytes() == b"old"
    assert UploadSession.objects.get(pk=uid).completed is None
    assert alice_api.delete(f"/api/v2/uploads/{uid}/").status_code == 204
    assert usage.get_usage(alice, "local").reserved_bytes == 0


@pytest.mark.parametrize("lock", ["a link", "a directory"])
def test_a_lock_file_a_job_replaced_refuses_writes_with_403(alice_api, home_dir, lock):
    uid = create(alice_api, f"{A}/f.bin", 5)
    (home_dir / ".uploads/.lock").unlink(missing_ok=True)
    if lock == "a link":
        os.symlink("/etc/passwd", home_dir / ".uploads/.lock")
    else:
        (home_dir / ".uploads/.lock").mkdir()
    r = patch(alice_api, uid, 0, b"01234")
    assert r.status_code == 403 and ".lock" in r.json()["detail"], r.content
    r = alice_api.put(f"/api/v2/files/content/?path={A}/g.bin", data=b"hello", content_type="application/octet-stream")
    assert r.status_code == 403, r.content
    assert not (home_dir / "f.bin").exists() and not (home_dir / "g.bin").exists()


def test_a_lock_a_job_holds_does_not_hold_a_server_thread_for_ever(transactional_db, alice_api, home_dir, monkeypatch):
    assert storage.LOCK_WAIT == 10  # as docs/operating/security.md says
    monkeypatch.setattr(storage, "LOCK_WAIT", 0.2)
    uid = create(alice_api, f"{A}/f.bin", 5)
    held = os.open(home_dir / ".uploads/.lock", os.O_RDWR | os.O_CREAT)  # as the job would, from its sandbox
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        t, box = in_thread(lambda: patch(alice_api, uid, 0, b"01234"))
        t.join(DEADLINE)
        stuck = t.is_alive()
    finally:
        os.close(held)  # lets a waiting server thread go
    t.join(DEADLINE)
    assert not stuck, "the server waits as long as the job holds the lock"
    r = box["answer"]
    assert r.status_code == 409 and ".lock" in r.json()["detail"], r.content
    assert not (home_dir / "f.bin").exists()
    r = patch(alice_api, uid, 5, b"", CONTENT_LENGTH="0")
    assert r.status_code == 200 and r.json()["complete"] is True, r.content  # once let go, it completes
    assert (home_dir / "f.bin").read_bytes() == b"01234"


def test_what_a_job_stores_in_uploads_counts_against_its_quota(alice, datacenter, alice_api, home_dir):
    (home_dir / "visible").write_bytes(b"v" * 100)
    uid = create(alice_api, f"{A}/f.bin", 1000)
    assert patch(alice_api, uid, 0, b"p" * 400).status_code == 200
    assert usage.recompute(alice, datacenter) == 100  # the service's own part: reserved, not counted
    (home_dir / ".uploads/stash").write_bytes(b"s" * 5000)  # the job's
    assert usage.recompute(alice, datacenter) == 5100
    with open(home_dir / ".uploads" / f"{uid}.part", "ab") as f:  # a part grown past its declared size
        f.write(b"x" * 1600)
    assert usage.recompute(alice, datacenter) == 5100 + 1000
    # what a write in progress holds covers its temporary file there
    StorageReservation.objects.create(user=alice, datacenter=datacenter, bytes=5000)
    assert usage.recompute(alice, datacenter) == 100 + 1000


def test_a_file_named_uploads_counts_against_its_quota(alice, datacenter, home_dir):
    (home_dir / ".uploads").write_bytes(b"s" * 7000)
    assert usage.recompute(alice, datacenter) == 7000


def test_uploads_swapped_for_a_file_before_a_streamed_chunk_is_answered_gets_a_403(
        alice, alice_api, home_dir, tmp_path):
    from pfs import asgi_fast

    uid = create(alice_api, f"{A}/f.bin", 10)
    writer = uploads.ChunkWriter(UploadSession.objects.get(pk=uid), 0, 5)
    writer.write([b"01234"])
    real = writer.finish

    def swapped_after():  # the job's move, once the chunk is stored, before its answer
        offset = real()
        os.rename(home_dir / ".uploads", tmp_path / "elsewhere")
        (home_dir / ".uploads").write_bytes(b"")
        return offset

    writer.finish = swapped_after
    with pytest.raises(asgi_fast._Refused) as refused:
        asgi_fast._finish(writer)
    assert refused.value.status == 403 and "'.uploads'" in refused.value.body["detail"]
