"""The web server's HTTP protocol: uvicorn's httptools protocol plus two zero-copy routes for
file bodies, so the bytes of a PFS transfer never pass through Python.

Run with `uvicorn --http core.server:HttpProtocol ...` (the Procfile and the image do).

Each request's ASGI scope advertises, under `scope["extensions"]`:

* `http.response.zerocopysend` (the ASGI spec's "Zero Copy Send" extension): after the head,
  the app sends `{"type": "http.response.zerocopysend", "file": <fd or file>, "offset": o,
  "count": n, "more_body": bool}` and the server moves those bytes from the page cache to the
  socket with sendfile(2). The response must have a Content-Length.
* `paddlecloud.body_to_file` (ours; the spec has no receive-side counterpart): `{"splice":
  coroutine(fd, offset, count, stored=None) -> int}` moves the next `count` bytes of the
  request body into the open file `fd` at `offset` with splice(2) (socket -> pipe -> file, one
  copy in the kernel) and returns how many were stored: fewer when the client went away or
  stalled for IDLE_TIMEOUT. `stored(n)`, if given, is called in the worker thread after each
  piece of `n` bytes lands in the file, in order (an app hashing the body reads them back
  while they are in the page cache); an exception from it ends the transfer with it. The app
  then answers as usual; it must not call `receive()` for that body.

uvicorn (0.54, pinned in requirements.txt) offers neither extension and has no public hook for
a protocol to add one, so this module subclasses its httptools protocol: it overrides the
private `_start_asgi_task` and drives the request cycle's internal state (`body`, `more_body`,
`expected_content_length`, ...). PINNED records the source of every uvicorn internal it relies
on; tests/test_library_seams.py fails when an upgrade changes any of them. When uvicorn ships
`http.response.zerocopysend` itself, the send half of this module goes. The suite runs the
transfer tests under stock uvicorn too (pfs/tests/test_asgi_fast.py), where apps fall back.

The system calls run in a worker thread on duplicates of the connection's and the file's
descriptors (so the app closing its file, or the server its connection, while a cancelled
transfer is still winding down can never point the thread at a reused descriptor), while the
event loop neither reads from nor writes to that connection. Neither extension is offered
over TLS (the bytes must be encrypted in user space); apps fall back to ordinary messages, as
they do under any other server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import multiprocessing
import os
import select
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.protocols.utils import is_ssl

from .asgi_types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application  # uvicorn's own name for the app it starts

ZERO_COPY_SEND = "http.response.zerocopysend"
BODY_TO_FILE = "paddlecloud.body_to_file"
IDLE_TIMEOUT = 60.0  # seconds without progress before a transfer is given up
PIPE_SIZE = 1 << 20  # the largest pipe an unprivileged process may ask for (pipe-max-size)
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

# uvicorn internals this module relies on, as sha256 (first 16 hex digits) of their source in
# the pinned uvicorn; checked by tests/test_library_seams.py.
PINNED = {
    "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol._start_asgi_task": "9c08c2571ae9b038",
    # the parser it makes (fresh_parser makes the same), and the body state it keeps
    "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol.__init__": "4f08999410347141",
    "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol.on_body": "dba9c32aeba35b6a",
    "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol.on_message_complete": "1fbad42dc31fc01f",
    "uvicorn.protocols.http.httptools_impl:RequestResponseCycle.__init__": "4d2f220910c33c12",
    "uvicorn.protocols.http.httptools_impl:RequestResponseCycle.send": "abdd8601b326a8da",
    "uvicorn.protocols.http.httptools_impl:RequestResponseCycle.receive": "8124ae006be71184",
    "uvicorn.protocols.utils:is_ssl": "cfb89711af847b7e",
}

logger = logging.getLogger("uvicorn.error")


def _end_with_the_supervisor() -> None:
    """With several web processes (`uvicorn --workers N`, or $WEB_CONCURRENCY), each is a child of
    uvicorn's supervisor, which nothing else watches: were the supervisor killed (`kill -9`), its
    workers would live on, holding the port, behind a tree that `make run` reports stopped. Each
    worker (a multiprocessing child, importing this module as its protocol) asks the kernel for
    SIGKILL when its parent dies (PR_SET_PDEATHSIG). tests/test_web_processes.py kills one."""
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return  # one web process: honcho (or the pod) watches it directly
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent.pid:  # the parent died before we asked
        os.kill(os.getpid(), signal.SIGKILL)


_end_with_the_supervisor()
# Transfers block a thread each for as long as they last; they get their own pool so that
# they never starve the default executor that Django's sync views run in.
_T = TypeVar("_T")
_transfers = ThreadPoolExecutor(max_workers=64, thread_name_prefix="zerocopy")


class HttpProtocol(HttpToolsProtocol):
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        if not is_ssl(self.transport):
            # uvicorn types the scope and messages as TypedDicts; the apps here, as plain dicts.
            app = _ZeroCopyRequest(self, cycle, app)  # type: ignore[arg-type, assignment]
        super()._start_asgi_task(cycle, app)

    def fresh_parser(self) -> None:
        """Start parsing anew at a request boundary (after a body the parser never saw)."""
        self.parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # httptools < 0.6.3
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn does


class _ZeroCopyRequest:
    """One request's ASGI call with the zero-copy extensions added to its scope."""

    def __init__(self, protocol: HttpProtocol, cycle: RequestResponseCycle, app: ASGIApp) -> None:
        self.protocol, self.cycle, self.app = protocol, cycle, app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extensions = scope.setdefault("extensions", {})
        extensions[ZERO_COPY_SEND] = {}
        extensions[BODY_TO_FILE] = {"splice": self.splice}

        async def zero_copy_send(message: Message) -> None:
            if message["type"] == ZERO_COPY_SEND:
                await self.sendfile(message)
            else:
                await send(message)

        try:
            await self.app(scope, receive, zero_copy_send)
        finally:
            # The scope names this object (its splice), which names the cycle, whose scope it is:
            # a reference cycle, which only the cycle collector would free, with what it holds.
            del extensions[BODY_TO_FILE]

    def _socket_dup(self) -> int:
        return os.dup(self.protocol.transport.get_extra_info("socket").fileno())

    async def _in_thread(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(_transfers, fn, *args)

    def _drop_connection(self, why: str) -> None:
        logger.info("closing a connection mid-transfer: %s", why)
        self.cycle.disconnected = True
        self.cycle.message_event.set()
        self.protocol.transport.close()

    async def sendfile(self, message: Message) -> None:
        cycle, transport = self.cycle, self.protocol.transport
        if not cycle.response_started or cycle.response_complete:
            raise RuntimeError(f"'{ZERO_COPY_SEND}' is only allowed in a response's body")
        file = message["file"]
        fd = file if isinstance(file, int) else file.fileno()
        offset = message.get("offset")
        if offset is None:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
        count = message.get("count")
        if count is None:
            count = os.fstat(fd).st_size - offset
        if count and cycle.scope["method"] != "HEAD" and not cycle.disconnected:
            if cycle.chunked_encoding:
                raise RuntimeError(f"'{ZERO_COPY_SEND}' needs a response with a Content-Length")
            if count > cycle.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            while transport.get_write_buffer_size() and not transport.is_closing():
                await asyncio.sleep(0.001)  # the head first; it normally left at once
            if transport.is_closing():
                return
            try:
                sent = await self._in_thread(_send_file, self._socket_dup(), os.dup(fd), offset, count)
            except OSError as e:  # the client went away or stalled
                self._drop_connection(str(e))
                return
            cycle.expected_content_length -= sent
            if sent < count:
                self._drop_connection(f"the file ended {count - sent} bytes early")
                return
        await cycle.send({"type": "http.response.body", "body": b"", "more_body": message.get("more_body", False)})

    async def splice(self, fd: int, offset: int, count: int, stored: Callable[[int], None] | None = None) -> int:
        cycle, transport = self.cycle, self.protocol.transport
        if cycle.response_started:
            raise RuntimeError("the request body is read before the response starts")
        if cycle.waiting_for_100_continue and not transport.is_closing():
            transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        # What the parser already took in, then the rest straight from the socket.
        head = bytes(cycle.body[:count])
        del cycle.body[:count]
        remaining = count - len(head)
        sock = -1
        if remaining and cycle.more_body and not cycle.disconnected:
            self.protocol.flow.pause_reading()
            sock = self._socket_dup()
        done = -1
        try:
            done = await self._in_thread(_store_body, head, sock, os.dup(fd), offset, remaining, stored)
        finally:
            if sock >= 0:
                if done == count:
                    # The body is complete and the parser never saw its tail: it starts again
                    # at the next request, so the connection stays usable.
                    self.protocol.fresh_parser()
                else:
                    cycle.keep_alive = False
                cycle.more_body = False
                cycle.message_event.set()
        return done


def _wait(fd: int, event: int) -> None:
    poller = select.poll()
    poller.register(fd, event)
    if not poller.poll(IDLE_TIMEOUT * 1000):
        raise TimeoutError(f"no progress for {IDLE_TIMEOUT:.0f} s")


def _send_file(sock: int, fd: int, offset: int, count: int) -> int:
    """sendfile(2) `count` bytes of `fd` from `offset` to the socket; fewer if the file ends.
    Owns (closes) both descriptors."""
    sent = 0
    try:
        while sent < count:
            try:
                n = os.sendfile(sock, fd, offset + sent, count - sent)
            except BlockingIOError:
                _wait(sock, select.POLLOUT)
                continue
            if n == 0:
                break
            sent += n
    finally:
        os.close(sock)
        os.close(fd)
    return sent


def _store_body(head: bytes, sock: int, fd: int, offset: int, remaining: int,
                told: Callable[[int], None] | None = None) -> int:
    """Write `head` at `offset`, then splice up to `remaining` bytes from the socket after it,
    telling `told(n)` of each piece stored. Returns the bytes stored; stops early when the
    client closes, resets or stalls. Errors of the file (a full disk) and of `told` propagate.
    Owns (closes) `fd` and `sock`, if any."""
    view, stored = memoryview(head), 0
    try:
        while stored < len(view):
            stored += os.pwrite(fd, view[stored:], offset + stored)
        if stored and told is not None:
            told(stored)
        if sock < 0:
            return stored
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            with contextlib.suppress(OSError):
                fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_SIZE)
            end = len(head) + remaining
            while stored < end:
                try:
                    n = os.splice(sock, w, min(PIPE_SIZE, end - stored),
                                  flags=os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK)
                except BlockingIOError:
                    try:
                        _wait(sock, select.POLLIN)
                    except TimeoutError:
                        break
                    continue
                except (ConnectionError, TimeoutError):
                    break
                if n == 0:
                    break  # the client closed the connection
                piece = n
                while n:
                    m = os.splice(r, fd, n, offset_dst=offset + stored)
                    n -= m
                    stored += m
                if told is not None:
                    told(piece)
        finally:
            os.close(r)
            os.close(w)
    finally:
        os.close(fd)
        if sock >= 0:
            os.close(sock)
    return stored
