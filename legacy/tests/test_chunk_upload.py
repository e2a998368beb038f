"""The v1 chunk upload (`POST /api/v1/pfs/storage/chunks`, legacy/asgi.py) over real HTTP: the
chunk streamed into its file as it arrives (never buffered whole first), the bodies other
clients may send parsed as Django parses them, and odd bodies refused by the protocol's rule."""

from __future__ import annotations

import hashlib
import os
import socket
from urllib.parse import urlencode

import httpx
import pytest

from tests.support import wait_for

from . import recorded as rec
from .conftest import BOUNDARY

A = "/pfs/local/home/alice"
MiB = 1 << 20


def chunk_body(path: str, offset: int, data: bytes, chunksize: int, *, boundary: str = BOUNDARY,
               head_extra: str = "", preamble: bytes = b"", ending: bytes = b"--\r\n") -> bytes:
    name = urlencode({"chunksize": chunksize, "offset": offset, "path": path})
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="chunk"; filename="{name}"\r\n{head_extra}'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    return preamble + head + data + f"\r\n--{boundary}".encode() + ending


def post(c, body: bytes, boundary: str = BOUNDARY) -> httpx.Response:
    return c.send("POST", "/api/v1/pfs/storage/chunks", content=body,
                  headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})


def raw_request(live, token: str, body_length: int) -> bytes:
    return (f"POST /api/v1/pfs/storage/chunks HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n"
            f"Authorization: Token {token}\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {body_length}\r\n\r\n").encode()


@pytest.fixture
def target(old_client, alice, settings):
    """A file of 8 MiB made by `touch` as the client makes it, and alice's client."""
    c = old_client(alice)
    c.replay(rec.TOUCH, size=8 * MiB, path=f"{A}/t.bin")
    return c, settings.PFS_ROOT / "local/home/alice/t.bin"


def test_a_chunk_is_written_as_it_arrives_not_after_the_whole_body(live, target):
    c, on_disk = target
    data = os.urandom(4 * MiB)
    body = chunk_body(f"{A}/t.bin", 4 * MiB, data, 4 * MiB)
    first = body.index(data) + 3 * MiB  # the head and 3 MiB of the data
    with socket.create_connection(("127.0.0.1", live.port), timeout=60) as s:
        s.sendall(raw_request(live, c.token, len(body)) + body[:first])

        def arrived() -> bool:
            with open(on_disk, "rb") as f:
                f.seek(4 * MiB)
                return f.read(2 * MiB) == data[:2 * MiB]
        wait_for(arrived, 60, what="the chunk's first bytes in the file while the rest is still unsent")
        s.sendall(body[first:])
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 OK") and b'"err": ""' in answer
    assert on_disk.read_bytes()[4 * MiB:] == data


def test_a_chunk_cut_off_keeps_what_arrived_and_a_resend_completes_it(live, target):
    c, on_disk = target
    data = os.urandom(4 * MiB)
    body = chunk_body(f"{A}/t.bin", 0, data, 4 * MiB)
    with socket.create_connection(("127.0.0.1", live.port), timeout=60) as s:
        s.sendall(raw_request(live, c.token, len(body)) + body[:body.index(data) + 3 * MiB])

        def arrived() -> bool:
            with open(on_disk, "rb") as f:
                return f.read(2 * MiB) == data[:2 * MiB]
        wait_for(arrived, 60, what="the first 2 MiB in the file")
    # the client finds the md5 differs and sends the chunk again
    assert c.replay(rec.CHUNK_META, path=f"{A}/t.bin", offset=0, chunksize=4 * MiB).json()["results"]["checksum"] \
        != hashlib.md5(data).hexdigest()
    assert c.upload_chunk(f"{A}/t.bin", 0, data, 4 * MiB).json() == {
        "err": "", "results": {"offset": 0, "len": 4 * MiB}}
    assert on_disk.read_bytes()[:4 * MiB] == data and on_disk.stat().st_size == 8 * MiB


@pytest.mark.parametrize("layout", [
    {"boundary": "----other-client-boundary"},  # any boundary the Content-Type names
    {"ending": b"--"},  # no CRLF after the closing delimiter
    {"ending": b"--\r\nan epilogue, which multipart allows\r\n"},
    {"preamble": b"a preamble, which multipart allows\r\n"},
    {"head_extra": "Content-Transfer-Encoding: binary\r\n"},
])
def test_bodies_other_clients_send_are_written_the_same(target, layout):
    c, on_disk = target
    data = os.urandom(MiB + 17) + f"\r\n--{BOUNDARY[:10]}".encode()  # a delimiter's start is data
    r = post(c, chunk_body(f"{A}/t.bin", 4096, data, 4 * MiB, **layout), layout.get("boundary", BOUNDARY))
    assert r.status_code == 200 and r.json() == {"err": "", "results": {"offset": 4096, "len": len(data)}}, r.text
    assert on_disk.read_bytes()[4096:4096 + len(data)] == data


def test_an_empty_chunk_and_one_byte(target):
    c, on_disk = target
    assert post(c, chunk_body(f"{A}/t.bin", 0, b"", 4096)).json()["results"] == {"offset": 0, "len": 0}
    assert post(c, chunk_body(f"{A}/t.bin", 1, b"\x07", 1)).json()["results"] == {"offset": 1, "len": 1}
    assert on_disk.read_bytes()[:3] == b"\0\x07\0"


@pytest.mark.parametrize("body, why", [
    (chunk_body(f"{A}/t.bin", 0, b"x" * 5000, 4096), "more than its chunksize"),
    (chunk_body(f"{A}/t.bin", 0, b"x" * 100, 4096, ending=b"\r\nContent-Disposition: form-data; "
                b'name="other"\r\n\r\ny\r\n--' + BOUNDARY.encode() + b"--\r\n"), "one part"),
    (chunk_body(f"{A}/t.bin", 0, b"x" * 100, 4096)[:-40] + b"y" * 40, "closing boundary"),  # none
    (chunk_body(f"{A}/t.bin", -1, b"x", 4096), "offset must be 0 or more"),
    (chunk_body(f"{A}/nothing-here", 0, b"x", 4096), "no such file or directory"),
    (chunk_body("/pfs/local/home/bob/t.bin", 0, b"x", 4096), "own home"),
    (chunk_body(f"{A}/t.bin", 0, b"x", 4096).replace(b"chunksize=", b"size="),
     "chunksize=<n>&offset=<o>&path=<path>"),
])
def test_odd_bodies_are_refused_with_the_reason(target, body, why):
    c, on_disk = target
    before = on_disk.read_bytes()[:4096]
    r = post(c, body)
    assert r.status_code == 200 and why in r.json()["err"], r.text
    if why not in ("closing boundary", "one part"):  # else what came before stays, as in a cut-off chunk
        assert on_disk.read_bytes()[:4096] == before
