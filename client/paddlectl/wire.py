"""File bodies moved by the kernel on a plain-HTTP connection: an upload chunk sent from the file
with sendfile(2), a download spliced from the socket into the file with splice(2) (Linux), so the
bytes of a `paddlectl cp` never pass through Python. httpx hands every 64 KiB of a body through
Python objects: at page-cache speed that was most of the client's time, three times what the
transfer itself cost (bench/transfer.py).

Only where nothing between us and the server needs the bytes in user space: an http:// endpoint
(TLS encrypts in user space), no proxy for it, and no custom httpx transport (tests, mounts);
elsewhere, and where the system calls are missing, pfs.py sends through httpx as before. Either
way the request heads are the same, and errors map to the same exceptions (ConnectionFailed for a
dropped connection, APIError for an answer >= 400).
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import os
import socket
import struct
import sys
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

from ._httpx import httpx
from .api import API, MAX_ANSWER, MAX_ERROR, error_from
from .errors import ConnectionFailed

STEP = 8 << 20  # bytes per system call, so progress moves and a stall is noticed
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
PIPE = 1 << 20


def usable(api: API) -> bool:
    """Whether bodies to and from this server may go by sendfile/splice."""
    parts = urlsplit(api.endpoint)
    if parts.scheme != "http" or getattr(api, "transport", None) is not None or not sys.platform.startswith("linux"):
        return False
    proxies = urllib.request.getproxies()
    return not (proxies.get("http") or proxies.get("all")) or bool(urllib.request.proxy_bypass(parts.hostname or ""))


class Connection:
    """One keep-alive connection to the server for a transfer's requests."""

    def __init__(self, api: API, timeout: float = 120.0):
        self.api = api
        parts = urlsplit(api.endpoint)
        self.prefix = parts.path.rstrip("/") + "/api/v2/"
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)

    def close(self) -> None:
        self.conn.close()

    def _head(self, method: str, path: str, params: dict[str, str] | None, headers: dict[str, str]) -> None:
        url = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        self.conn.putrequest(method, url, skip_accept_encoding=True)
        merged: dict[str, tuple[str, str]] = {}
        for key, value in [*self.api.http.headers.items(), *self.api._auth_header().items(), *headers.items()]:
            merged[key.lower()] = (key, value)  # ours over httpx's defaults (its Accept-Encoding among them)
        for key, value in merged.values():
            self.conn.putheader(key, value)
        self.conn.endheaders()

    def _answer(self) -> http.client.HTTPResponse:
        response = self.conn.getresponse()
        if response.status >= 400:
            body = response.read(MAX_ERROR)  # no more of it: a server cannot fill our memory
            raise error_from(httpx.Response(response.status, content=body, headers=response.getheaders()))
        return response

    def send_file(self, path: str, headers: dict[str, str], fd: int, offset: int, length: int,
                  sent: Callable[[int], None]) -> Any:
        """`PATCH path` with `length` bytes of `fd` from `offset` as its body; the JSON answer.
        `sent(n)` is told of each part that went out."""
        try:
            self._head("PATCH", path, None, {**headers, "Content-Length": str(length)})
            sock = self.conn.sock
            assert sock is not None
            end = offset + length
            with _blocking(sock):
                while offset < end:
                    try:
                        n = os.sendfile(sock.fileno(), fd, offset, min(STEP, end - offset))
                    except BlockingIOError:
                        raise _stalled() from None
                    if n == 0:
                        raise ConnectionFailed("the file got shorter while it was being uploaded")
                    offset += n
                    sent(n)
            response = self._answer()
            data = response.read(MAX_ANSWER)
            if response.read(1):
                raise ConnectionFailed(f"the server's answer to PATCH {path} is over {MAX_ANSWER >> 20} MiB")
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            raise ConnectionFailed(f"cannot reach {self.api.endpoint}: {e or type(e).__name__}") from None
        return httpx.Response(response.status, content=data).json() if data else None

    def get_to_file(self, path: str, params: dict[str, str], headers: dict[str, str],
                    open_file: Callable[[int, dict[str, str]], int], received: Callable[[int], None]) -> None:
        """`GET path`; `open_file(status, headers)` gives the descriptor its body is spliced into."""
        try:
            self._head("GET", path, params, {**headers, "Accept-Encoding": "identity"})
            response = self._answer()
            head = {k.lower(): v for k, v in response.getheaders()}
            if "content-length" not in head or head.get("transfer-encoding"):
                raise ConnectionFailed("the server sent no Content-Length for the file")
            out = open_file(response.status, head)
            assert self.conn.sock is not None
            with _blocking(self.conn.sock):
                _splice_body(response, self.conn.sock, out, int(head["content-length"]), received)
            if response.will_close:
                self.conn.close()
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            raise ConnectionFailed(f"cannot reach {self.api.endpoint}: {e or type(e).__name__}") from None


@contextlib.contextmanager
def _blocking(sock: socket.socket) -> Iterator[None]:
    """`sock` in blocking mode for a body moved by the kernel, its timeout kept by the kernel
    (SO_SNDTIMEO, SO_RCVTIMEO): non-blocking, each sendfile/splice moved only what fitted in the
    socket's buffer at that instant, and a 1 GiB download took tens of thousands of calls and a
    poll between most of them (about 1 s of CPU more than blocking ones)."""
    timeout = sock.gettimeout()
    if timeout is not None:
        tv = struct.pack("ll", int(timeout), int((timeout % 1) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.settimeout(None)
    try:
        yield
    finally:
        sock.settimeout(timeout)


def _stalled() -> TimeoutError:
    """What EAGAIN means on a socket `_blocking` set up: the kernel's timeout passed with no byte
    moved (the peer stopped reading or sending)."""
    return TimeoutError("no progress within the connection's timeout")


def _splice_body(response: http.client.HTTPResponse, sock: socket.socket, out: int, length: int,
                 received: Callable[[int], None]) -> None:
    """The body into `out`: what http.client already buffered, then socket -> pipe -> file."""
    total = 0
    buffered = response.fp.peek(0)[:length] if length else b""
    if buffered:
        response.fp.read(len(buffered))
        os.write(out, buffered)
        total = len(buffered)
        received(total)
    r, w = os.pipe()
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(w, F_SETPIPE_SZ, PIPE)
        while total < length:
            try:
                n = os.splice(sock.fileno(), w, min(PIPE, length - total))
            except BlockingIOError:
                raise _stalled() from None
            if n == 0:
                raise ConnectionFailed(f"the connection closed after {total} of {length} bytes")
            while n:
                m = os.splice(r, out, n)
                n -= m
                total += m
                received(m)
    finally:
        os.close(r)
        os.close(w)
    response.length = 0  # all read: closes the response, so the connection may carry the next request
    response.read()
