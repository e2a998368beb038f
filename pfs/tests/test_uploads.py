"""The resumable upload protocol: offsets, checksums, interruption and resume over a real
socket, quota refusal with cleanup, concurrent uploads to one path, abandoned uploads."""

import base64
import hashlib
import os
import socket
import threading
from datetime import timedelta
from urllib.parse import urlparse

import google_crc32c
import pytest
import requests
from django.conf import settings
from django.utils import timezone

from pfs import services, upload_parts, uploads
from pfs.models import UploadSession
from pfs.usage import QuotaExceeded

from .conftest import scratch, sha256_file, write

A = "/pfs/local/home/alice"
OCTETS = "application/offset+octet-stream"


def part(home_dir, session):
    """Where an upload's data is kept until it is complete."""
    return scratch(home_dir) / upload_parts.part_name(session)


def leftovers(home_dir):
    return [n for n in os.listdir(scratch(home_dir)) if n != ".lock"]


def patch(api, upload_id, offset, data, **headers):
    return api.generic("PATCH", f"/api/v2/uploads/{upload_id}/", data, content_type=OCTETS,
                       HTTP_UPLOAD_OFFSET=str(offset), **headers)


def create(api, path, size, **extra):
    return api.post("/api/v2/uploads/", {"path": path, "size": size, **extra}, format="json")


def test_chunked_upload_with_checksums(alice_api, home_dir):
    data = os.urandom(3 * 1024 * 1024 + 17)
    digest = hashlib.sha256(data).hexdigest()
    r = create(alice_api, f"{A}/sub/dir/file.bin", len(data), sha256=digest)
    assert r.status_code == 201 and r["Upload-Offset"] == "0" and r["Location"].endswith(f"{r.json()['id']}/")
    uid = r.json()["id"]
    offset = 0
    while offset < len(data):
        chunk = data[offset:offset + 1024 * 1024]
        b64 = base64.b64encode(hashlib.sha256(chunk).digest()).decode()
        r = patch(alice_api, uid, offset, chunk, HTTP_UPLOAD_CHECKSUM=f"sha256 {b64}")
        assert r.status_code == 200, r.content
        offset = int(r["Upload-Offset"])
        assert r.json()["offset"] == offset
        assert not (home_dir / "sub/dir/file.bin").exists() or offset == len(data)  # never partial
    assert r.json()["complete"] is True
    assert sha256_file(home_dir / "sub/dir/file.bin") == digest
    assert leftovers(home_dir) == []  # nothing left behind
    r = alice_api.head(f"/api/v2/uploads/{uid}/")
    assert r.status_code == 200 and r["Upload-Offset"] == str(len(data))  # a lost final answer is recoverable


def test_offset_conflicts_and_bad_chunks(alice_api, home_dir):
    uid = create(alice_api, f"{A}/f.bin", 10).json()["id"]
    assert patch(alice_api, uid, 0, b"01234").status_code == 200
    r = patch(alice_api, uid, 3, b"34567")
    assert r.status_code == 409 and r.json()["offset"] == 5 and r["Upload-Offset"] == "5"
    r = patch(alice_api, uid, 5, b"56789", HTTP_UPLOAD_CHECKSUM="sha256 " + base64.b64encode(b"x" * 32).decode())
    assert r.status_code == 460
    assert alice_api.get(f"/api/v2/uploads/{uid}/").json()["offset"] == 5  # discarded
    assert patch(alice_api, uid, 5, b"56789abc").status_code == 413
    r = patch(alice_api, uid, 5, b"56789", HTTP_UPLOAD_CHECKSUM="md5 " +
              base64.b64encode(hashlib.md5(b"56789").digest()).decode())
    assert r.status_code == 200 and r.json()["complete"]
    assert (home_dir / "f.bin").read_bytes() == b"0123456789"
    assert patch(alice_api, uid, 10, b"x").status_code == 409


def test_a_chunk_django_would_buffer_is_limited_to_64_mib(alice_api, home_dir):
    """Through Django (browser sessions) a chunk is spooled before the view runs, so its size is
    bounded; refused from Content-Length alone, nothing written."""
    uid = create(alice_api, f"{A}/f.bin", 2 * settings.PFS_MAX_CHUNK).json()["id"]
    r = patch(alice_api, uid, 0, b"abc", CONTENT_LENGTH=str(settings.PFS_MAX_CHUNK + 1))
    assert r.status_code == 413 and "at most" in r.json()["detail"]
    assert alice_api.get(f"/api/v2/uploads/{uid}/").json()["offset"] == 0


def test_a_crc32c_promised_through_django_is_checked_against_the_chunks_as_they_came(alice_api, home_dir):
    """The Django view (browser sessions, and any client without the streaming route) takes
    `crc32c_later` and `Upload-Crc32c` as the streaming route does: the running CRC fed by each
    chunk, the file put in place once the right one comes, a wrong one discarding the upload."""
    data = os.urandom(2 * 1024 * 1024 + 5)
    for name, sent, status in (("wrong.bin", f"{google_crc32c.value(b'other'):08x}", 422),
                               ("right.bin", f"{google_crc32c.value(data):08x}", 200)):
        r = create(alice_api, f"{A}/{name}", len(data), crc32c_later=True)
        assert r.status_code == 201 and r.json()["crc32c_later"] is True and r.json()["sha256_later"] is False
        uid = r.json()["id"]
        assert patch(alice_api, uid, 0, data[:1024 * 1024]).status_code == 200
        r = patch(alice_api, uid, 1024 * 1024, data[1024 * 1024:], HTTP_UPLOAD_CRC32C=sent)
        assert r.status_code == status, r.content
        assert (home_dir / name).exists() == (status == 200)
    assert (home_dir / "right.bin").read_bytes() == data
    assert leftovers(home_dir) == []


def test_whole_file_checksum_mismatch_discards(alice_api, home_dir):
    uid = create(alice_api, f"{A}/f.bin", 4, sha256="0" * 64).json()["id"]
    r = patch(alice_api, uid, 0, b"abcd")
    assert r.status_code == 422 and "checksum" in r.json()["detail"]
    assert not (home_dir / "f.bin").exists()
    assert alice_api.get(f"/api/v2/uploads/{uid}/").status_code == 404
    assert leftovers(home_dir) == []


def test_empty_file_and_cancel(alice_api, home_dir):
    r = create(alice_api, f"{A}/empty", 0)
    assert r.status_code == 201 and r.json()["complete"] and (home_dir / "empty").read_bytes() == b""
    uid = create(alice_api, f"{A}/c.bin", 100).json()["id"]
    patch(alice_api, uid, 0, b"x" * 50)
    assert alice_api.get("/api/v2/uploads/").json()["count"] == 1
    assert alice_api.delete(f"/api/v2/uploads/{uid}/").status_code == 204
    assert not (scratch(home_dir) / f"{uid}.part").exists() and not (home_dir / "c.bin").exists()


def test_quota_refuses_before_writing(alice_api, alice, datacenter, home_dir):
    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=1000)
    r = create(alice_api, f"{A}/big.bin", 2000)
    assert r.status_code == 413 and r.json()["detail"] == "quota exceeded: used 0 B of 1000.0 B".replace(
        "1000.0 B", "1000 B")
    assert UploadSession.objects.count() == 0 and not list(scratch(home_dir).glob("*.part"))
    # unfinished uploads reserve their size
    assert create(alice_api, f"{A}/a.bin", 600).status_code == 201
    r = create(alice_api, f"{A}/b.bin", 600)
    assert r.status_code == 413 and r.json()["detail"].startswith("quota exceeded: used 600 B of 1000 B")
    # one-shot uploads too, and nothing of them is left
    r = alice_api.put(f"/api/v2/files/content/?path={A}/c.bin", data=b"x" * 500,
                      content_type="application/octet-stream")
    assert r.status_code == 413 and "quota exceeded" in r.json()["detail"]
    assert not (home_dir / "c.bin").exists() and not list(scratch(home_dir).glob("put-*"))
    # replacing a file only needs room for the difference
    write(home_dir / "r.bin", b"x" * 300)
    services.usage.recompute(alice, datacenter)
    assert create(alice_api, f"{A}/r.bin", 400).status_code == 201


def test_a_replaced_files_room_goes_to_one_unfinished_upload_at_a_time(alice_api, alice, datacenter, home_dir):
    """Else each of any number of uploads replacing one file would hold up to its size on disk,
    reserving nothing, for as long as its chunks keep coming."""
    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=1000)
    write(home_dir / "r.bin", b"x" * 900)
    services.usage.recompute(alice, datacenter)
    first = create(alice_api, f"{A}/r.bin", 900)
    assert first.status_code == 201
    r = create(alice_api, f"{A}/r.bin", 900)
    assert r.status_code == 413 and r.json()["detail"].startswith("quota exceeded: used 900 B of 1000 B")
    assert patch(alice_api, first.json()["id"], 0, b"y" * 900).json()["complete"] is True
    assert create(alice_api, f"{A}/r.bin", 900).status_code == 201, "the first one is done: its room is free again"


@pytest.mark.django_db(transaction=True)
def test_parallel_uploads_replacing_one_file_cannot_all_take_its_room(alice, datacenter, home_dir):
    from django.db import connection

    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=1000)
    write(home_dir / "r.bin", b"x" * 900)
    services.usage.recompute(alice, datacenter)
    start, outcomes = threading.Barrier(4), []

    def start_upload():
        try:
            start.wait(30)
            uploads.create(alice, f"{A}/r.bin", 900)
            outcomes.append("admitted")
        except QuotaExceeded:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=start_upload) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["admitted", "refused", "refused", "refused"]


def test_quota_refuses_while_writing_unknown_length(alice, datacenter, home_dir):
    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=5 * 2**20)
    chunks = (b"x" * 2**20 for _ in range(8))
    with pytest.raises(QuotaExceeded) as e:
        services.write_file(alice, f"{A}/stream.bin", chunks, length=None)
    assert e.value.status == 413 and e.value.message.startswith("quota exceeded: used")
    assert not (home_dir / "stream.bin").exists() and not list(scratch(home_dir).glob("put-*"))


def test_abandoned_uploads_are_removed(alice_api, alice, home_dir):
    uid = create(alice_api, f"{A}/old.bin", 100).json()["id"]
    patch(alice_api, uid, 0, b"x" * 10)
    UploadSession.objects.filter(pk=uid).update(updated=timezone.now() - timedelta(days=2))
    orphan = write(scratch(home_dir) / "put-orphan.part", b"junk")
    os.utime(orphan, (0, 0))
    assert uploads.cleanup_stale() == 2
    assert leftovers(home_dir) == []
    assert alice_api.get(f"/api/v2/uploads/{uid}/").status_code == 404


# --- over a real socket ---------------------------------------------------------------------

@pytest.fixture
def http(transactional_db, live_server, alice, home_dir):
    from accounts.services import issue_token

    s = requests.Session()
    s.headers["Authorization"] = f"Token {issue_token(alice)}"
    s.base = live_server.url
    return s


def _raw_patch_then_drop(base: str, token: str, upload_id: str, offset: int, data: bytes, claimed: int) -> None:
    """Send a PATCH claiming `claimed` bytes, send only `data`, and cut the connection."""
    u = urlparse(base)
    with socket.create_connection((u.hostname, u.port)) as s:
        head = (f"PATCH /api/v2/uploads/{upload_id}/ HTTP/1.1\r\nHost: {u.netloc}\r\n"
                f"Authorization: Token {token}\r\nContent-Type: {OCTETS}\r\nUpload-Offset: {offset}\r\n"
                f"Content-Length: {claimed}\r\n\r\n")
        s.sendall(head.encode() + data)
        s.shutdown(socket.SHUT_WR)
        s.recv(65536)  # the server answers (or closes) once it sees the body end early


def test_interrupted_upload_resumes(http, home_dir, tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(6 * 2**20 + 123))
    size, digest = src.stat().st_size, sha256_file(src)
    r = http.post(f"{http.base}/api/v2/uploads/", json={"path": f"{A}/data/src.bin", "size": size, "sha256": digest})
    uid = r.json()["id"]
    token = http.headers["Authorization"].split()[1]
    with open(src, "rb") as f:
        first = f.read(2 * 2**20 + 5)
    # The connection dies 2 MiB into a 4 MiB chunk.
    _raw_patch_then_drop(http.base, token, uid, 0, first, 4 * 2**20)
    offset = int(http.head(f"{http.base}/api/v2/uploads/{uid}/").headers["Upload-Offset"])
    assert 0 < offset <= len(first)
    assert not (home_dir / "data" / "src.bin").exists()
    # Resume from where the server says, in one streamed request.
    with open(src, "rb") as f:
        f.seek(offset)
        r = http.patch(f"{http.base}/api/v2/uploads/{uid}/", data=f,
                       headers={"Upload-Offset": str(offset), "Content-Type": OCTETS,
                                "Content-Length": str(size - offset)})
    assert r.status_code == 200, r.text
    assert r.json()["complete"] and r.headers["Upload-Offset"] == str(size)
    assert sha256_file(home_dir / "data" / "src.bin") == digest


def test_concurrent_uploads_to_one_path_leave_one_complete_file(http, alice, home_dir):
    size = 3 * 2**20
    contents = {i: bytes([i]) * size for i in range(1, 6)}
    errors = []

    def upload(i):
        try:
            s = requests.Session()
            s.headers.update(http.headers)
            r = s.post(f"{http.base}/api/v2/uploads/", json={"path": f"{A}/same.bin", "size": size})
            uid = r.json()["id"]
            for off in range(0, size, 2**20):
                r = s.patch(f"{http.base}/api/v2/uploads/{uid}/", data=contents[i][off:off + 2**20],
                            headers={"Upload-Offset": str(off), "Content-Type": OCTETS})
                assert r.status_code == 200, r.text
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=upload, args=(i,)) for i in contents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    final = (home_dir / "same.bin").read_bytes()
    assert final in contents.values()
    assert not list(scratch(home_dir).glob("*.part"))
    assert http.get(f"{http.base}/api/v2/storage/usage/").json()["used_bytes"] == size


def test_a_request_racing_the_one_that_completes_the_upload_is_refused(alice_api, home_dir, monkeypatch):
    """The last chunk's request holds the part file's lock until the file is in place: a retry
    arriving meanwhile is told so (409), and neither request fails."""
    upload_id = create(alice_api, f"{A}/f.bin", 4).json()["id"]
    real, raced = uploads.put_in_place, []

    def put_in_place_raced(*args, **kwargs):
        if not raced:
            try:
                uploads.write_chunk(UploadSession.objects.get(pk=upload_id), 4, lambda n: b"", 0)
                raced.append("let in")
            except uploads.PathError as e:
                raced.append(e.status)
        return real(*args, **kwargs)

    monkeypatch.setattr(uploads, "put_in_place", put_in_place_raced)
    r = patch(alice_api, upload_id, 0, b"data")
    assert r.status_code == 200 and r.json()["complete"] is True and raced == [409]
    assert (home_dir / "f.bin").read_bytes() == b"data"
    retry = patch(alice_api, upload_id, 0, b"data")  # once it is complete: a conflict, not a 500 or 410
    assert retry.status_code == 409 and retry["Upload-Offset"] == "4"


# --- ChunkWriter (shared by the Django view and the streaming route) ---------------------------

def test_chunk_writer_batches_holes_and_short_writes(alice, home_dir, monkeypatch):
    import random

    rnd = random.Random(7)
    blocks = [rnd.randbytes(100_000), bytes(262_144), rnd.randbytes(50_001), b"", bytes(300_000)]
    data = b"".join(blocks)
    uid = uploads.create(alice, f"{A}/w.bin", len(data) + 10).pk
    session = uploads.get(alice, uid)
    real = os.pwritev
    calls = []

    def short_pwritev(fd, bufs, pos):  # the kernel may write less than asked: the rest must follow
        calls.append(len(bufs))
        first = memoryview(bufs[0])[: max(1, len(bufs[0]) // 3)]
        return real(fd, [first], pos)

    monkeypatch.setattr(uploads.os, "pwritev", short_pwritev)
    writer = uploads.ChunkWriter(session, 0, len(data))
    writer.write(blocks[:2])
    assert os.path.getsize(part(home_dir, session)) == 362_144  # a trailing hole still counts
    writer.write(blocks[2:])
    assert writer.finish() == len(data)
    assert calls  # the short writes happened and were resumed
    assert part(home_dir, session).read_bytes() == data
    # a second writer on the same upload: the offset is checked, then a chunk past the size
    with pytest.raises(uploads.OffsetConflict):
        uploads.ChunkWriter(uploads.get(alice, uid), 5, 1)
    writer = uploads.ChunkWriter(uploads.get(alice, uid), len(data), None)
    with pytest.raises(uploads.PathError) as e:
        writer.write([b"x" * 11])
    writer.abort()
    assert e.value.status == 413 and os.path.getsize(part(home_dir, session)) == len(data)


def test_chunk_writer_is_exclusive_and_checksummed(alice, home_dir):
    uid = uploads.create(alice, f"{A}/x.bin", 8).pk
    first = uploads.ChunkWriter(uploads.get(alice, uid), 0, 4, ("sha256", hashlib.sha256(b"abcd").digest()))
    with pytest.raises(uploads.PathError) as e:
        uploads.ChunkWriter(uploads.get(alice, uid), 0, 4)
    assert e.value.status == 409 and "another request" in e.value.message
    first.write([b"ab", b"cX"])
    with pytest.raises(uploads.PathError) as e:
        first.finish()
    assert e.value.status == 460
    assert os.path.getsize(part(home_dir, uploads.get(alice, uid))) == 0  # discarded, lock released
    second = uploads.ChunkWriter(uploads.get(alice, uid), 0, 8)
    second.write([b"abcd"])
    with pytest.raises(uploads.PathError) as e:
        second.finish()  # the request ended early: what arrived is kept
    assert e.value.status == 400 and "4 bytes early" in e.value.message
    assert part(home_dir, uploads.get(alice, uid)).read_bytes() == b"abcd"


def test_spliced_bytes_are_hashed_beside_the_splice_not_between_its_pieces(alice, home_dir, monkeypatch):
    """`stored(n)` (the server's splice thread, after each piece lands in the part file) hands
    the piece to a thread that reads it back into the running sha256: the splice goes on
    reading the socket meanwhile instead of waiting for each piece's hash. `finish` waits for
    the hash, which then covers every byte (the upload completes against its sha256)."""
    from pfs import upload_digest

    mib = 1 << 20
    data = os.urandom(3 * mib)
    uid = uploads.create(alice, f"{A}/s.bin", len(data), sha256=hashlib.sha256(data).hexdigest()).pk
    writer = uploads.ChunkWriter(uploads.get(alice, uid), 0, len(data))
    real, hashing, release = upload_digest.hash_file, threading.Event(), threading.Event()

    def held_hash_file(h, fd, offset, length):
        hashing.set()
        assert release.wait(60)
        real(h, fd, offset, length)

    monkeypatch.setattr(upload_digest, "hash_file", held_hash_file)
    spliced = threading.Event()

    def splice():  # what core.server's _store_body does: each piece into the file, then told
        for at in range(0, len(data), mib):
            os.pwrite(writer.fd, data[at:at + mib], at)
            writer.stored(mib)
        spliced.set()

    splicer = threading.Thread(target=splice)
    splicer.start()
    try:
        assert spliced.wait(30)  # all stored while the first piece's hash is held
        assert hashing.wait(30)  # ... in the follower's thread, which may start after the splice is done
    finally:
        release.set()
        splicer.join()
    writer.advance(len(data))
    assert writer.finish() == len(data)
    assert (home_dir / "s.bin").read_bytes() == data


def test_the_hash_follows_at_most_lag_bytes_behind_and_its_errors_come_out(tmp_path, monkeypatch):
    from pfs import upload_digest

    mib = 1 << 20
    data = os.urandom(4 * mib)
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        real, gate, behind = upload_digest.hash_file, threading.Semaphore(0), []

        def gated(h, fd, offset, length):
            behind.append(follower._landed - offset)
            assert gate.acquire(timeout=60)
            real(h, fd, offset, length)

        monkeypatch.setattr(upload_digest, "hash_file", gated)
        h = hashlib.sha256()
        follower = upload_digest.Follower(h, fd, 0, lag=mib)
        splicer = threading.Thread(target=lambda: [follower.landed(mib) for _ in range(4)])
        splicer.start()
        for _ in range(4):
            gate.release()
        splicer.join()
        follower.close()
        assert h.hexdigest() == hashlib.sha256(data).hexdigest()
        assert behind and max(behind) <= 2 * mib  # the splice waited: never more than lag + a piece

        def broken(h, fd, offset, length):
            raise OSError("the disk went away")

        monkeypatch.setattr(upload_digest, "hash_file", broken)
        follower = upload_digest.Follower(hashlib.sha256(), fd, 0, lag=mib)
        follower.landed(mib)
        with pytest.raises(OSError, match="went away"):
            follower.close()
        with pytest.raises(OSError, match="went away"):
            follower.landed(mib)
    finally:
        os.close(fd)
