"""core.server, the web server's HTTP protocol, over real sockets: uvicorn in a thread
serving a small ASGI app that uses the two zero-copy extensions the way pfs does. What is
checked is what a client sees on the wire (bytes, framing, keep-alive) and what lands in the
file, plus how the server copes with clients that expect 100-continue, cut a body short or go
away mid-download."""

import contextlib
import hashlib
import http.client
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from core import server
from tests.support import LiveASGI

MiB = 2**20


class App:
    """GET /file?offset&count -> that span of `path` by zero-copy send (HEAD: the head only);
    PUT /store -> the body spliced into `target` at 0, answered with the bytes stored (with
    `?told`, each piece stored is read back and hashed as the server reports it; `?told=fail`
    raises from the second report on);
    GET /extensions -> the scope's extension names."""

    def __init__(self, path, target):
        self.path, self.target = path, target
        self.stored: list[int] = []
        self.told: list[int] = []
        self.digest = hashlib.sha256()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        ext = scope.get("extensions", {})
        if scope["path"] == "/extensions":
            body = " ".join(sorted(ext)).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        elif scope["path"] == "/file":
            query = dict(p.split("=") for p in scope["query_string"].decode().split("&"))
            offset, count = int(query["offset"]), int(query["count"])
            with open(self.path, "rb") as f:
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-length", str(count).encode())]})
                await send({"type": server.ZERO_COPY_SEND, "file": f, "offset": offset, "count": count})
        elif scope["path"] == "/store":
            length = int(dict(scope["headers"])[b"content-length"])
            fd = os.open(self.target, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            query = scope["query_string"].decode()

            def told(n: int) -> None:
                if query == "told=fail" and self.told:
                    raise OSError("the app refuses the rest")
                self.digest.update(os.pread(fd, n, sum(self.told)))  # in the file already
                self.told.append(n)

            try:
                n = await ext[server.BODY_TO_FILE]["splice"](fd, 0, length, told if query else None)
            finally:
                os.close(fd)
            self.stored.append(n)
            body = str(n).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})


@pytest.fixture
def live(tmp_path):
    data = os.urandom(6 * MiB + 123)
    (tmp_path / "src.bin").write_bytes(data)
    app = App(tmp_path / "src.bin", tmp_path / "dst.bin")
    with LiveASGI(app) as live:
        live.app, live.data = app, data
        yield live


def test_the_protocol_offers_both_extensions(live):
    conn = http.client.HTTPConnection("127.0.0.1", live.port)
    conn.request("GET", "/extensions")
    assert conn.getresponse().read().split() == [server.ZERO_COPY_SEND.encode(), server.BODY_TO_FILE.encode()]


def test_file_spans_are_sent_by_sendfile_on_a_connection_that_stays_open(live, zero_copy_calls):
    conn = http.client.HTTPConnection("127.0.0.1", live.port)
    for offset, count in ((0, len(live.data)), (MiB - 7, 3 * MiB), (len(live.data) - 1, 1)):
        conn.request("GET", f"/file?offset={offset}&count={count}")
        resp = conn.getresponse()
        assert resp.status == 200 and not resp.will_close
        assert resp.read() == live.data[offset:offset + count]
    assert zero_copy_calls == [("sendfile", 0, len(live.data)), ("sendfile", MiB - 7, 3 * MiB),
                     ("sendfile", len(live.data) - 1, 1)]


def test_head_requests_get_the_head_only(live, zero_copy_calls):
    conn = http.client.HTTPConnection("127.0.0.1", live.port)
    conn.request("HEAD", f"/file?offset=0&count={MiB}")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-length") == str(MiB) and resp.read() == b""
    conn.request("GET", "/file?offset=0&count=10")  # the connection is still in step
    assert conn.getresponse().read() == live.data[:10]
    assert zero_copy_calls == [("sendfile", 0, 10)]


def test_a_body_is_spliced_into_the_file_and_the_next_request_parses(live, zero_copy_calls, tmp_path):
    conn = http.client.HTTPConnection("127.0.0.1", live.port)
    body = os.urandom(5 * MiB + 3)
    conn.request("PUT", "/store", body=body)
    resp = conn.getresponse()
    assert resp.status == 200 and not resp.will_close and resp.read() == str(len(body)).encode()
    assert (tmp_path / "dst.bin").read_bytes() == body
    # the same connection: the parser starts afresh after the body it never saw
    conn.request("PUT", "/store", body=b"second")
    assert conn.getresponse().read() == b"6"
    assert (tmp_path / "dst.bin").read_bytes() == b"second"
    assert zero_copy_calls == [("splice", len(body)), ("splice", 6)]


def test_expect_100_continue_is_answered_before_the_body_is_read(live, tmp_path):
    body = os.urandom(MiB)
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(f"PUT /store HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n"
                  .encode())
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        resp = http.client.HTTPResponse(s)
        resp.begin()
        assert resp.status == 200 and resp.read() == str(len(body)).encode()
    assert (tmp_path / "dst.bin").read_bytes() == body


def test_a_body_cut_short_stores_what_arrived_and_closes_the_connection(live, tmp_path):
    part = os.urandom(3 * MiB + 5)
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(f"PUT /store HTTP/1.1\r\nHost: x\r\nContent-Length: {8 * MiB}\r\n\r\n".encode() + part)
        s.shutdown(socket.SHUT_WR)
        resp = http.client.HTTPResponse(s)
        resp.begin()
        assert resp.read() == str(len(part)).encode() and resp.will_close
    assert live.app.stored == [len(part)]
    assert (tmp_path / "dst.bin").read_bytes() == part
    conn = http.client.HTTPConnection("127.0.0.1", live.port)  # the server carries on
    conn.request("GET", "/file?offset=0&count=4")
    assert conn.getresponse().read() == live.data[:4]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_client_leaving_mid_download_does_not_disturb_the_server(live, tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(256 * MiB)  # far more than the socket buffers hold: the server is mid-send
    live.app.path = big
    before = _open_fds()
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(f"GET /file?offset=0&count={256 * MiB} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not FIN
    live.app.path = tmp_path / "src.bin"
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=5)
    conn.request("GET", "/file?offset=0&count=5")
    assert conn.getresponse().read() == live.data[:5]
    conn.close()
    # the abandoned transfer ends and closes its descriptors (socket, duplicate, file)
    deadline = time.monotonic() + 10
    while _open_fds() > before:
        assert time.monotonic() < deadline, "descriptors left open"
        time.sleep(0.05)


def test_the_web_process_leaves_its_startup_heap_out_of_garbage_collections():
    """paddleweb.asgi freezes what startup made (the views included), so a full collection during
    a request walks only what requests allocate (bench/job_list.py: p99 ~120 ms before, ~40 after)."""
    code = ("import gc, sys; import paddleweb.asgi; "
            "print(gc.get_freeze_count(), len(gc.get_objects()), 'jobs.views' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frozen, tracked, views_loaded = out.stdout.split()
    assert views_loaded == "True", "the URLconf is loaded before the freeze"
    assert int(frozen) > 10 * int(tracked), (frozen, tracked)


def test_the_app_is_told_of_each_piece_as_it_lands_and_may_stop_the_transfer(live, tmp_path):
    """`stored(n)`: called after each piece is in the file, in order (here each piece is read
    back and hashed, as pfs.uploads does); an exception from it ends the transfer with it."""
    body = os.urandom(5 * MiB + 3)
    conn = http.client.HTTPConnection("127.0.0.1", live.port)
    conn.request("PUT", "/store?told", body=body)
    assert conn.getresponse().read() == str(len(body)).encode()
    assert sum(live.app.told) == len(body) and len(live.app.told) > 1
    assert live.app.digest.digest() == hashlib.sha256(body).digest()
    conn.close()
    live.app.told.clear()
    with socket.create_connection(("127.0.0.1", live.port)) as sock:
        # The server may answer and close with the body's rest unread while this still sends: the
        # send then fails (a reset), and the answer that came before the reset is still here to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b"PUT /store?told=fail HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert sock.makefile("rb").readline().split()[1] == b"500"
    assert len(live.app.told) == 1 and live.app.stored == [len(body)]  # the failed one stored nothing
