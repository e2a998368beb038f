"""wire.py's kernel-moved bodies against a peer slower than the kernel: the connection's socket has
a timeout, so it is non-blocking underneath, and sendfile(2)/splice(2) on it answer EAGAIN when
its buffer is full (or empty). The transfer must wait for the peer then, not fail, and fail once
nothing moved for the connection's timeout, not wait for ever."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

from paddlectl import wire
from paddlectl.api import API
from paddlectl.errors import ConnectionFailed

MiB = 1 << 20


def _serve_once(handle: Callable[[socket.socket], None]) -> tuple[str, threading.Thread]:
    """A one-connection HTTP peer on loopback running `handle(conn)` in a thread."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited: a slow, small window
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def run() -> None:
        with listener, listener.accept()[0] as conn:
            handle(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", thread


def _read_head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(1)
    return data


def test_an_upload_chunk_waits_while_the_peer_reads_slowly(tmp_path):
    size = 16 * MiB  # far more than the loopback socket buffers hold
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(size))
    started = threading.Event()
    got = bytearray()

    def handle(conn: socket.socket) -> None:
        _read_head(conn)
        started.wait(30)  # nothing read until the client has filled the buffers once
        while len(got) < size:
            block = conn.recv(64 << 10)
            if not block:
                return
            got.extend(block)
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n'
                     b'{"offset": 16}\n')

    url, thread = _serve_once(handle)
    conn = wire.Connection(API(url, token="t"))
    sent: list[int] = []

    def count(n: int) -> None:
        sent.append(n)
        started.set()

    with open(src, "rb") as f:
        answer = conn.send_file("uploads/x/", {"Upload-Offset": "0"}, f.fileno(), 0, size, count)
    conn.close()
    thread.join(30)
    assert answer == {"offset": 16}
    assert sum(sent) == size and bytes(got) == src.read_bytes()
    assert len(sent) > 1  # the first send filled the buffers: the rest waited for the peer


def test_a_download_waits_while_the_peer_sends_slowly(tmp_path):
    data = os.urandom(4 * MiB)
    first = threading.Event()

    def handle(conn: socket.socket) -> None:
        _read_head(conn)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data[:MiB])
        first.wait(30)  # the rest only once the client has taken in the first part: it finds none
        for at in range(MiB, len(data), 256 << 10):
            conn.sendall(data[at:at + (256 << 10)])

    url, thread = _serve_once(handle)
    conn = wire.Connection(API(url, token="t"))
    out = tmp_path / "out.bin"
    received: list[int] = []

    def count(n: int) -> None:
        received.append(n)
        if sum(received) >= MiB:
            first.set()

    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        conn.get_to_file("files/content/", {"path": "/x"}, {}, lambda status, head: fd, count)
    finally:
        os.close(fd)
        conn.close()
    thread.join(30)
    assert out.read_bytes() == data


def test_an_upload_to_a_peer_that_stops_reading_fails_after_the_timeout(tmp_path):
    size = 16 * MiB
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(size))
    done = threading.Event()

    def handle(conn: socket.socket) -> None:
        _read_head(conn)
        done.wait(60)  # reads nothing more: the client's buffers fill and stay full

    url, thread = _serve_once(handle)
    conn = wire.Connection(API(url, token="t"), timeout=1.0)
    outcome: list[ConnectionFailed] = []

    def upload() -> None:
        with open(src, "rb") as f:
            try:
                conn.send_file("uploads/x/", {"Upload-Offset": "0"}, f.fileno(), 0, size, lambda n: None)
            except ConnectionFailed as e:
                outcome.append(e)

    sender = threading.Thread(target=upload, daemon=True)
    sender.start()
    sender.join(30)  # the timeout is 1 s: far longer means it waits for ever
    done.set()
    conn.close()
    assert not sender.is_alive(), "the upload still waits on a peer that stopped reading"
    assert len(outcome) == 1, "the upload neither failed nor finished"
