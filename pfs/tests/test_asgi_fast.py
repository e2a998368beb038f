"""The ASGI HTTP entry (pfs/asgi_fast.py) over real HTTP: uvicorn with core.server's
protocol, as in the Procfile, runs the project's ASGI application in a thread against the test
database. Upload chunks sent with a token take the streaming route (auth, ownership, offsets,
size, checksums, completion and a resume after a cut connection are checked there), their
bodies spliced to disk unless a checksum needs them read; downloads go through Django's
handler (ranges, If-Range, 416), their file bytes by sendfile. Every test of `live_asgi` runs
twice: with that protocol, and with stock uvicorn's, which offers no zero-copy extension, so
the plain fallback path (bodies through `receive()`, files read in threads) is tested too."""

import asyncio
import base64
import hashlib
import http.client
import json
import os
import socket
import time
import uuid

import google_crc32c
import pytest
import requests
from django.conf import settings

from pfs import asgi_fast
from pfs.models import UploadSession
from tests.support import LiveASGI

from .conftest import scratch, sha256_file, write

A = "/pfs/local/home/alice"
OCTETS = "application/offset+octet-stream"
MiB = 2**20


@pytest.fixture(params=["zero-copy", "plain"])
def live_asgi(request, transactional_db, alice, bob, home_dir, monkeypatch, zero_copy_calls):
    """The server, alice's and bob's token sessions, a count of streamed chunks and the
    zero-copy transfers the server made; `live.zero_copied(calls)` is what those should be:
    `calls` where the server offers zero-copy, none on the plain path."""
    from accounts.services import issue_token

    streamed = []
    real = asgi_fast.patch_chunk

    async def counting(*args, **kwargs):
        streamed.append(args[3])
        return await real(*args, **kwargs)

    monkeypatch.setattr(asgi_fast, "patch_chunk", counting)
    offered = request.param == "zero-copy"
    with LiveASGI(zero_copy=offered) as live:
        live.zero_copied = lambda calls: calls if offered else []
        live.streamed = streamed
        live.zero_copy = zero_copy_calls
        live.alice, live.bob = requests.Session(), requests.Session()
        live.alice_token = issue_token(alice)
        live.alice.headers["Authorization"] = f"Token {live.alice_token}"
        live.bob.headers["Authorization"] = f"Token {issue_token(bob)}"
        yield live


def create(live, path, size, **extra):
    r = live.alice.post(f"{live.url}/api/v2/uploads/", json={"path": path, "size": size, **extra})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def patch(session, live, uid, offset, data, **headers):
    return session.patch(f"{live.url}/api/v2/uploads/{uid}/", data=data,
                         headers={"Upload-Offset": str(offset), "Content-Type": OCTETS, **headers})


def part(home_dir, uid):
    return scratch(home_dir) / f"{uid}.part"


def test_streamed_chunks_complete_the_upload(live_asgi, home_dir):
    data = os.urandom(9 * MiB + 321)  # spans several receive batches and a sparse-looking tail
    data += bytes(MiB)
    digest = hashlib.sha256(data).hexdigest()
    uid = create(live_asgi, f"{A}/in/dir/big.bin", len(data), sha256=digest)
    offset = 0
    for size in (5 * MiB, 3 * MiB + 7, len(data)):
        chunk = data[offset:offset + size]
        b64 = base64.b64encode(hashlib.sha256(chunk).digest()).decode()
        r = patch(live_asgi.alice, live_asgi, uid, offset, chunk, **{"Upload-Checksum": f"sha256 {b64}"})
        assert r.status_code == 200, r.text
        offset += len(chunk)
        assert r.headers["Upload-Offset"] == str(offset) == str(r.json()["offset"])
        assert r.headers["Upload-Length"] == str(len(data)) and r.headers["Cache-Control"] == "no-store"
        assert r.json()["complete"] is (offset == len(data))
        if offset < len(data):
            assert not (home_dir / "in/dir/big.bin").exists()  # never partial
    assert len(live_asgi.streamed) == 3  # all three took the streaming route
    assert live_asgi.zero_copy == []  # read in Python: their checksums had to be computed
    assert sha256_file(home_dir / "in/dir/big.bin") == digest
    assert [n for n in os.listdir(scratch(home_dir)) if n != ".lock"] == []
    # the same answer as the Django view gives for the upload's state
    state = live_asgi.alice.get(f"{live_asgi.url}/api/v2/uploads/{uid}/").json()
    assert set(state) == set(r.json()) and state["offset"] == len(data) and state["complete"]
    usage = live_asgi.alice.get(f"{live_asgi.url}/api/v2/storage/usage/").json()
    assert usage["used_bytes"] == len(data) and usage["reserved_bytes"] == 0


def test_authentication_is_required(live_asgi, home_dir):
    uid = create(live_asgi, f"{A}/f.bin", 10)
    url = f"{live_asgi.url}/api/v2/uploads/{uid}/"
    headers = {"Upload-Offset": "0", "Content-Type": OCTETS}
    r = requests.patch(url, data=b"0123456789", headers=headers)  # no credentials: Django refuses
    assert r.status_code in (401, 403)
    for bad in ("Token nope", "Token", "Token a b", f"Token {live_asgi.alice_token[:-1]}x"):
        r = requests.patch(url, data=b"0123456789", headers={**headers, "Authorization": bad})
        assert r.status_code == 401, (bad, r.text)
        assert r.headers["WWW-Authenticate"] == "Token" and r.json()["detail"]
    assert live_asgi.streamed == []  # refused from the head, in front of the route (core/body_limits.py)
    assert part(home_dir, uid).stat().st_size == 0  # nothing written


def test_another_users_upload_is_not_found(live_asgi, home_dir):
    uid = create(live_asgi, f"{A}/f.bin", 10)
    for target in (uid, "00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        r = patch(live_asgi.bob, live_asgi, target, 0, b"0123456789")
        assert r.status_code == 404 and "no such upload" in r.json()["detail"]
    assert part(home_dir, uid).stat().st_size == 0


def test_wrong_offset_conflicts_without_writing(live_asgi, home_dir):
    uid = create(live_asgi, f"{A}/f.bin", 10)
    assert patch(live_asgi.alice, live_asgi, uid, 0, b"01234").status_code == 200
    for offset in (3, 7, 0):
        r = patch(live_asgi.alice, live_asgi, uid, offset, b"34567")
        assert r.status_code == 409 and r.json()["offset"] == 5 and r.headers["Upload-Offset"] == "5"
    r = patch(live_asgi.alice, live_asgi, uid, "x", b"5")
    assert r.status_code == 400 and "Upload-Offset" in r.json()["detail"]
    assert part(home_dir, uid).read_bytes() == b"01234"
    r = patch(live_asgi.alice, live_asgi, uid, 5, b"56789")
    assert r.status_code == 200 and r.json()["complete"]
    assert patch(live_asgi.alice, live_asgi, uid, 10, b"x").status_code == 409  # complete already
    assert (home_dir / "f.bin").read_bytes() == b"0123456789"


def test_quota_and_size_limits(live_asgi, alice, datacenter, home_dir):
    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=1000)
    r = live_asgi.alice.post(f"{live_asgi.url}/api/v2/uploads/", json={"path": f"{A}/big.bin", "size": 2000})
    assert r.status_code == 413 and r.json()["detail"].startswith("quota exceeded: used 0 B of 1000 B")
    uid = create(live_asgi, f"{A}/ok.bin", 600)  # reserves 600 of the 1000
    r = live_asgi.alice.post(f"{live_asgi.url}/api/v2/uploads/", json={"path": f"{A}/b.bin", "size": 600})
    assert r.status_code == 413 and "quota exceeded" in r.json()["detail"]
    r = patch(live_asgi.alice, live_asgi, uid, 0, b"x" * 601)  # more than the upload declared
    assert r.status_code == 413 and "past the upload's size" in r.json()["detail"]
    assert part(home_dir, uid).stat().st_size == 0
    assert patch(live_asgi.alice, live_asgi, uid, 0, b"x" * 600).json()["complete"]
    assert len(live_asgi.streamed) == 2


def test_checksum_mismatch_discards_the_chunk(live_asgi, home_dir):
    uid = create(live_asgi, f"{A}/f.bin", 3 * MiB)
    assert patch(live_asgi.alice, live_asgi, uid, 0, b"a" * MiB).status_code == 200
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    r = patch(live_asgi.alice, live_asgi, uid, MiB, os.urandom(2 * MiB), **{"Upload-Checksum": f"sha256 {wrong}"})
    assert r.status_code == 460 and "checksum mismatch" in r.json()["detail"]
    assert part(home_dir, uid).stat().st_size == MiB
    r = patch(live_asgi.alice, live_asgi, uid, MiB, b"b", **{"Upload-Checksum": "crc32 AAAA"})
    assert r.status_code == 400 and "unsupported checksum" in r.json()["detail"]
    # a whole-file sha256 that does not match discards the upload
    uid2 = create(live_asgi, f"{A}/g.bin", 4, sha256="0" * 64)
    r = patch(live_asgi.alice, live_asgi, uid2, 0, b"abcd")
    assert r.status_code == 422 and not (home_dir / "g.bin").exists()
    assert not UploadSession.objects.filter(pk=uid2).exists()


def _patch_then_cut(live, uid, offset, data: bytes, claimed: int) -> None:
    """Send a PATCH claiming `claimed` bytes, send only `data`, and cut the connection."""
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        head = (f"PATCH /api/v2/uploads/{uid}/ HTTP/1.1\r\nHost: x\r\nAuthorization: Token {live.alice_token}\r\n"
                f"Content-Type: {OCTETS}\r\nUpload-Offset: {offset}\r\nContent-Length: {claimed}\r\n\r\n")
        s.sendall(head.encode() + data)
        s.shutdown(socket.SHUT_WR)
        s.recv(65536)


def test_resume_after_a_cut_connection(live_asgi, home_dir, tmp_path):
    data = os.urandom(12 * MiB + 5)
    digest = hashlib.sha256(data).hexdigest()
    uid = create(live_asgi, f"{A}/data/src.bin", len(data), sha256=digest)
    sent = 6 * MiB + 17
    _patch_then_cut(live_asgi, uid, 0, data[:sent], 10 * MiB)  # dies 6 MiB into a 10 MiB chunk
    assert live_asgi.streamed and live_asgi.zero_copy == live_asgi.zero_copied([("splice", 10 * MiB)])
    url = f"{live_asgi.url}/api/v2/uploads/{uid}/"
    deadline = time.monotonic() + 20
    while True:
        # The server may still be storing the last bytes that arrived; the protocol says: ask
        # for the offset, send from there, and ask again on 409.
        offset = int(live_asgi.alice.head(url).headers["Upload-Offset"])
        assert 0 <= offset <= sent
        r = patch(live_asgi.alice, live_asgi, uid, offset, data[offset:])
        if r.status_code != 409 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert r.status_code == 200, r.text
    assert r.json()["complete"] and r.headers["Upload-Offset"] == str(len(data))
    assert offset > 0  # what arrived before the cut was kept
    assert sha256_file(home_dir / "data" / "src.bin") == digest


def test_session_requests_still_go_through_django(monkeypatch):
    """Without a token header the PATCH is Django's (session auth and CSRF apply there)."""
    seen, fast = [], []

    async def django(scope, receive, send):
        seen.append(scope["path"])

    async def streamed(scope, receive, send, upload_id, auth):
        fast.append((upload_id, auth))

    monkeypatch.setattr(asgi_fast, "patch_chunk", streamed)
    app = asgi_fast.PfsASGI(django)
    for root, path in (("", "/api/v2/uploads/u1/"), ("/paddle", "/paddle/api/v2/uploads/u2/")):
        scope = {"type": "http", "method": "PATCH", "path": path, "root_path": root,
                 "headers": [(b"Authorization", b"token abc")]}
        asyncio.run(app(scope, None, None))
    assert fast == [("u1", "token abc"), ("u2", "token abc")] and seen == []
    for method, path, headers in [
        ("PATCH", "/api/v2/uploads/abc/", [(b"cookie", b"sessionid=x")]),
        ("PATCH", "/api/v2/uploads/abc/", [(b"authorization", b"Basic eDp5")]),
        ("PATCH", "/api/v2/uploads/abc/extra/", [(b"authorization", b"Token t")]),
        ("GET", "/api/v2/uploads/abc/", [(b"authorization", b"Token t")]),
        ("PATCH", "/api/v2/uploads/", [(b"authorization", b"Token t")]),
    ]:
        scope = {"type": "http", "method": method, "path": path, "headers": headers}
        asyncio.run(app(scope, None, None))
    assert len(seen) == 5 and len(fast) == 2


# --- downloads through the ASGI handler -------------------------------------------------------

@pytest.fixture
def big(home_dir):
    return write(home_dir / "big.bin", os.urandom(9 * MiB + 1234))  # more than two blocks


def test_download_streams_whole_file_and_ranges(live_asgi, big):
    data = big.read_bytes()
    url = f"{live_asgi.url}/api/v2/files/content/"
    r = live_asgi.alice.get(url, params={"path": f"{A}/big.bin"}, stream=True)
    assert r.status_code == 200 and r.headers["Content-Length"] == str(len(data))
    assert r.headers["Accept-Ranges"] == "bytes"
    assert hashlib.sha256(b"".join(r.iter_content(MiB))).digest() == hashlib.sha256(data).digest()
    tag = r.headers["ETag"]
    start = 4 * MiB - 10  # across a block boundary
    r = live_asgi.alice.get(url, params={"path": f"{A}/big.bin"}, headers={"Range": f"bytes={start}-", "If-Range": tag})
    assert r.status_code == 206 and r.content == data[start:]
    assert r.headers["Content-Range"] == f"bytes {start}-{len(data) - 1}/{len(data)}"
    r = live_asgi.alice.get(url, params={"path": f"{A}/big.bin"}, headers={"Range": "bytes=5-", "If-Range": '"old"'})
    assert r.status_code == 200 and len(r.content) == len(data)  # changed since: the whole file
    r = live_asgi.alice.get(url, params={"path": f"{A}/big.bin"}, headers={"Range": f"bytes={len(data)}-"})
    assert r.status_code == 416 and r.headers["Content-Range"] == f"bytes */{len(data)}"
    r = live_asgi.bob.get(url, params={"path": f"{A}/big.bin"})
    assert r.status_code == 403
    # every file body went by sendfile, the whole file, the range, then the whole file again
    assert live_asgi.zero_copy == live_asgi.zero_copied([("sendfile", 0, len(data)),
                                                         ("sendfile", start, len(data) - start),
                                                         ("sendfile", 0, len(data))])


def test_a_whole_file_in_one_patch_spliced_on_a_kept_alive_connection(live_asgi, home_dir):
    """A token PATCH may carry the whole rest of a file, past the 64 MiB a browser chunk may
    have; without a checksum it is spliced to disk, and the connection serves the next request."""
    data = os.urandom(settings.PFS_MAX_CHUNK + 3 * MiB)
    digest = hashlib.sha256(data).hexdigest()
    uid = create(live_asgi, f"{A}/whole.bin", len(data), sha256=digest)
    conn = http.client.HTTPConnection("127.0.0.1", live_asgi.port)
    auth = {"Authorization": f"Token {live_asgi.alice_token}"}
    conn.request("PATCH", f"/api/v2/uploads/{uid}/", body=data,
                 headers={**auth, "Upload-Offset": "0", "Content-Type": OCTETS})
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["complete"] and not resp.will_close
    assert live_asgi.zero_copy == live_asgi.zero_copied([("splice", len(data))])
    assert sha256_file(home_dir / "whole.bin") == digest
    conn.request("GET", f"/api/v2/files/content/?path={A}/whole.bin", headers={**auth, "Range": "bytes=-5"})
    resp = conn.getresponse()
    assert resp.status == 206 and resp.read() == data[-5:]


def test_static_files_go_by_sendfile(live_asgi):
    from django.conf import settings

    css = settings.BASE_DIR / "static" / "css" / "app.css"
    url, plain = f"{live_asgi.url}/static/css/app.css", {"Accept-Encoding": "identity"}
    r = requests.get(url, headers=plain)
    assert r.status_code == 200 and r.content == css.read_bytes()
    assert live_asgi.zero_copy == live_asgi.zero_copied([("sendfile", 0, css.stat().st_size)])
    r = requests.get(url, headers={**plain, "Range": "bytes=5-9"})
    assert r.status_code == 206 and r.content == css.read_bytes()[5:10]
    # no sendfile more: a range is read in Python
    assert live_asgi.zero_copy == live_asgi.zero_copied([("sendfile", 0, css.stat().st_size)])


async def test_without_zero_copy_a_static_file_streams_in_threads_without_a_warning():
    import warnings

    from asgiref.testing import ApplicationCommunicator
    from django.conf import settings

    from paddleweb.asgi import application

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": "/static/css/app.css", "raw_path": b"/static/css/app.css", "root_path": "", "query_string": b"",
             "headers": [(b"host", b"testserver")], "server": ("testserver", 80), "client": ("127.0.0.1", 1)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        app = ApplicationCommunicator(application, scope)
        await app.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await app.receive_output(10)
        body = b""
        while True:
            msg = await app.receive_output(10)
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
    assert start["status"] == 200
    assert body == (settings.BASE_DIR / "static" / "css" / "app.css").read_bytes()


# The whole-file digests an upload may be checked by, computed here independently of pfs:
# by algorithm, the digest of some bytes and the chunk header that brings it.
DIGESTS = {"sha256": (lambda b: hashlib.sha256(b).hexdigest(), "Upload-Sha256"),
           "crc32c": (lambda b: f"{google_crc32c.value(b):08x}", "Upload-Crc32c")}


@pytest.mark.parametrize("algo", DIGESTS)
def test_a_digest_given_later_is_checked_against_the_bytes_as_they_arrived(live_asgi, home_dir, algo):
    """`sha256_later` / `crc32c_later`: the whole file's digest comes with a chunk; the server
    hashes each chunk as it lands (spliced ones read back piece by piece), so the bytes are not
    read again after the last one: a part file changed behind the server's back after its chunk
    was stored goes unnoticed by the check, which covers the bytes that arrived."""
    from pfs import upload_digest

    hexdigest, header = DIGESTS[algo]
    data = os.urandom(3 * MiB + 11)
    digest = hexdigest(data)
    r = live_asgi.alice.post(f"{live_asgi.url}/api/v2/uploads/",
                             json={"path": f"{A}/later.bin", "size": len(data), f"{algo}_later": True})
    assert r.status_code == 201 and r.json()[f"{algo}_later"] is True and r.json()[algo] == ""
    other = "crc32c" if algo == "sha256" else "sha256"
    assert r.json()[f"{other}_later"] is False and r.json()[other] == ""
    uid = r.json()["id"]
    assert patch(live_asgi.alice, live_asgi, uid, 0, data[:2 * MiB]).status_code == 200
    with open(part(home_dir, uid), "r+b") as f:  # what the server stored, changed after the fact
        f.write(b"\0" * 16)
    r = patch(live_asgi.alice, live_asgi, uid, 2 * MiB, data[2 * MiB:], **{header: digest})
    assert r.status_code == 200 and r.json()["complete"] and r.json()[algo] == digest
    assert (home_dir / "later.bin").read_bytes() == b"\0" * 16 + data[16:]
    assert live_asgi.zero_copy == live_asgi.zero_copied([("splice", 2 * MiB), ("splice", MiB + 11)])
    # Where this process has no running hash (another one took the chunks, or it restarted),
    # the part file is read: then the same change is caught.
    uid = create(live_asgi, f"{A}/again.bin", len(data), **{f"{algo}_later": True})
    assert patch(live_asgi.alice, live_asgi, uid, 0, data[:2 * MiB]).status_code == 200
    with open(part(home_dir, uid), "r+b") as f:
        f.write(b"\0" * 16)
    upload_digest.forget(uuid.UUID(uid))
    r = patch(live_asgi.alice, live_asgi, uid, 2 * MiB, data[2 * MiB:], **{header: digest})
    assert r.status_code == 422 and f"checksum mismatch: the file's {algo} is" in r.json()["detail"]
    assert not (home_dir / "again.bin").exists() and not UploadSession.objects.filter(pk=uid).exists()


@pytest.mark.parametrize("algo", DIGESTS)
def test_an_upload_promised_a_digest_waits_for_it_and_refuses_a_wrong_one(live_asgi, home_dir, algo):
    hexdigest, header = DIGESTS[algo]
    data = os.urandom(MiB + 3)
    digest = hexdigest(data)
    for name, sent, status in (("wrong.bin", hexdigest(b"other"), 422), ("right.bin", digest, 200)):
        uid = create(live_asgi, f"{A}/{name}", len(data), **{f"{algo}_later": True})
        r = patch(live_asgi.alice, live_asgi, uid, 0, data)  # every byte, no digest yet: not put in place
        assert r.status_code == 200 and r.json()["offset"] == len(data) and not r.json()["complete"]
        assert not (home_dir / name).exists()
        r = patch(live_asgi.alice, live_asgi, uid, len(data), b"", **{header: sent})
        assert r.status_code == status, r.text
        assert (home_dir / name).exists() == (status == 200)
        assert UploadSession.objects.filter(pk=uid).exists() == (status == 200)
    assert (home_dir / "right.bin").read_bytes() == data
    # a digest other than one given before is refused, nothing written; so is a malformed one,
    # and one of the other algorithm
    width = len(digest)
    uid = create(live_asgi, f"{A}/twice.bin", 8, **{f"{algo}_later": True})
    assert patch(live_asgi.alice, live_asgi, uid, 0, b"abcd", **{header: "1" * width}).status_code == 200
    r = patch(live_asgi.alice, live_asgi, uid, 4, b"efgh", **{header: "2" * width})
    assert r.status_code == 422 and part(home_dir, uid).stat().st_size == 4
    r = patch(live_asgi.alice, live_asgi, uid, 4, b"efgh", **{header: "xyz"})
    assert r.status_code == 400 and part(home_dir, uid).stat().st_size == 4
    other_header = DIGESTS["crc32c" if algo == "sha256" else "sha256"][1]
    other_width = 72 - width  # 64 and 8 hex digits
    r = patch(live_asgi.alice, live_asgi, uid, 4, b"efgh", **{other_header: "1" * other_width})
    assert r.status_code == 400 and f"checked by {algo}" in r.json()["detail"]
    assert part(home_dir, uid).stat().st_size == 4
    r = patch(live_asgi.alice, live_asgi, uid, 4, b"efgh", **{header: "1" * width, other_header: "1" * other_width})
    assert r.status_code == 400 and part(home_dir, uid).stat().st_size == 4


def test_a_crc32c_given_up_front_is_the_castagnoli_crc_in_big_endian_hex(live_asgi, home_dir):
    """CRC-32C's check value (RFC 3720, B.4): "123456789" is 0xe3069283; the upload is checked
    against it before it is put in place, and a wrong one discards it."""
    uid = create(live_asgi, f"{A}/check.txt", 9, crc32c="E3069283")
    r = patch(live_asgi.alice, live_asgi, uid, 0, b"123456789")
    assert r.status_code == 200 and r.json()["complete"] and r.json()["crc32c"] == "e3069283"
    assert (home_dir / "check.txt").read_bytes() == b"123456789"
    uid = create(live_asgi, f"{A}/wrong.txt", 9, crc32c="e3069284")
    r = patch(live_asgi.alice, live_asgi, uid, 0, b"123456789")
    assert r.status_code == 422 and "crc32c is e3069283, not e3069284" in r.json()["detail"]
    assert not (home_dir / "wrong.txt").exists()


@pytest.mark.parametrize("asked", [
    {"sha256": "0" * 64, "sha256_later": True}, {"crc32c": "0" * 8, "sha256_later": True},
    {"crc32c_later": True, "sha256_later": True}, {"crc32c": "0" * 8, "crc32c_later": True},
    {"crc32c": "0" * 64}, {"crc32c": "xyz12345"},
])
def test_an_upload_asking_for_more_than_one_digest_or_a_malformed_one_is_refused(live_asgi, asked):
    r = live_asgi.alice.post(f"{live_asgi.url}/api/v2/uploads/", json={"path": f"{A}/x.bin", "size": 4, **asked})
    assert r.status_code == 400, r.text
    assert not UploadSession.objects.exists()
