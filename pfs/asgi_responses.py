"""How file bodies leave Django under ASGI: the one place that depends on Django's ASGI handler.

Django's ASGI handler reads a sync streaming body whole into memory before sending it, and cuts
every part into 64 KiB messages. Through public extension points only, this module:

* (`FileBodies`, a Django middleware, first in MIDDLEWARE) gives a download's file span
  (`response.file_span`, set by pfs.transfer for the API, the pages and share links) or a static
  file's (WhiteNoise's FileResponse) to the server's `http.response.zerocopysend` when the server
  offers it: the response keeps its head and an empty body, and `ZeroCopyResponses` (an ASGI
  wrapper around Django, which put a `_SpanSink` into the request's scope) sends the span by
  zero-copy send just before Django's closing body message. Any other sync streaming body is
  read block by block in worker threads (`transfer.in_threads`) instead of whole.
* (`LargeChunkASGIHandler`) sends response parts of up to `transfer.BLOCK` bytes in one
  message each, so a block read by pfs.transfer is never re-sliced; `ASGIHandler.chunk_size` is
  a class attribute, not a documented setting: tests/test_library_seams.py fails when the pinned
  Django changes it or the `send_response` this relies on (a closing empty body message, the
  response closed after it), recorded in PINNED.

Under WSGI, or a server without zero-copy send, responses go through unchanged (the suite runs
the transfer tests under stock uvicorn too: pfs/tests/test_asgi_fast.py).
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from django.http import StreamingHttpResponse

from core.asgi_django import SyncChainASGIHandler
from core.asgi_types import ASGIApp, Message, Receive, Scope, Send
from core.server import ZERO_COPY_SEND

from . import transfer

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.http.response import HttpResponseBase

SPAN_SINK = "paddlecloud.file_span"  # the scope key of a request's _SpanSink

# Django internals this module relies on, as sha256 (first 16 hex digits) of their source in
# the pinned Django (requirements.txt); checked by tests/test_library_seams.py.
PINNED = {
    "django.core.handlers.asgi:ASGIHandler.chunk_bytes": "6c045731cd77bd2d",
    "django.core.handlers.asgi:ASGIHandler.send_response": "77eda2b08689b44e",
    "django.core.handlers.asgi:ASGIHandler.handle": "98faeb5bef800331",
}


class LargeChunkASGIHandler(SyncChainASGIHandler):
    """Django's ASGI handler (its middleware chain in one thread per request: core/asgi_django.py)
    sending response parts of up to transfer.BLOCK bytes per message (the server does the
    low-level chunking and flow control)."""

    chunk_size = transfer.BLOCK


class _SpanSink:
    """One request's file span to send by zero-copy send, and the `send` that sends it just
    before the closing (empty, last) body message."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.span: transfer.FileSpan | None = None

    async def send(self, message: Message) -> None:
        span = self.span
        if (span is not None and span.fd >= 0 and message["type"] == "http.response.body"
                and not message.get("more_body")):
            await self._send({"type": ZERO_COPY_SEND, "file": span.fd, "offset": span.start,
                              "count": span.length, "more_body": True})
        await self._send(message)


class ZeroCopyResponses:
    """ASGI wrapper around Django: where the server offers zero-copy send, a `_SpanSink` goes
    into the request's scope (FileBodies hands it the span) and wraps `send`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and ZERO_COPY_SEND in scope.get("extensions", {}):
            sink = _SpanSink(send)
            scope, send = {**scope, SPAN_SINK: sink}, sink.send
        await self.app(scope, receive, send)


class FileBodies:
    """Django middleware: file spans to the server's zero-copy send, other sync streaming
    bodies read in worker threads, under ASGI; nothing under WSGI."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        scope = getattr(request, "scope", None)  # only an ASGI request has one
        # Only StreamingHttpResponses (FileResponse among them) have .streaming set.
        if scope is None or not isinstance(response, StreamingHttpResponse) or response.is_async:
            return response
        sink = scope.get(SPAN_SINK)
        span = getattr(response, "file_span", None) or _whole_file_span(response)
        if sink is not None and span is not None:
            sink.span = span
            response.streaming_content = _no_body()  # the span is closed with the response
        else:  # Django would read a sync iterator whole into memory first (not is_async: it is one)
            response.streaming_content = transfer.in_threads(response.streaming_content)  # type: ignore[arg-type]
        return response


async def _no_body() -> AsyncIterator[bytes]:
    part: bytes
    for part in ():
        yield part


def _whole_file_span(response: StreamingHttpResponse) -> transfer.FileSpan | None:
    """The rest of a FileResponse's regular file (WhiteNoise's static files) as a span."""
    f = getattr(response, "file_to_stream", None)
    if not isinstance(f, io.BufferedReader):  # ranges come as WhiteNoise's SlicedFile
        return None
    try:
        st = os.fstat(f.fileno())
        start = f.tell()
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    length = response.get("Content-Length", st.st_size - start)  # type: ignore[call-overload]  # any default
    span = transfer.FileSpan(os.dup(f.fileno()), start, int(length))
    response.streaming_content = span  # closed with the response, like the file
    return span
