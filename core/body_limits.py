"""Every HTTP request body is bounded, and an anonymous one refused, before a byte of it is read.

Django's ASGI handler reads a whole body (spooling it to FILE_UPLOAD_TEMP_DIR past 2.5 MB)
before any view or middleware of its own runs, and DATA_UPLOAD_MAX_MEMORY_SIZE covers form
fields only. So this ASGI middleware, in front of everything HTTP (paddleweb/asgi.py), decides
from the head alone:

* a request that has a body and no valid credentials (session cookie, or `Authorization: Token`)
  gets 401, unless its path takes a body without login (login forms, token endpoints): those
  get at most ANONYMOUS_BODY_MAX bytes;
* a token `PATCH /api/v2/uploads/<id>/` (streamed to disk by pfs.asgi_fast) is bounded by the
  upload's declared size there; every other authenticated body by REQUEST_BODY_MAX;
* a declared Content-Length above the limit gets 413 at once; a chunked body is cut off at the
  limit with 413.

Refusals close the connection (`Connection: close`), so the server stops reading the body
instead of draining it.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from channels.db import database_sync_to_async
from django.conf import settings
from django.http.cookie import parse_cookie

from .asgi_types import ASGIApp, Message, Receive, Scope, Send
from .headers import header

# Whether a request's credentials (its Authorization header, its session key) name an active user.
Authenticated = Callable[[str | None, str | None], bool]
# Whether a route streams this request's body itself, bounded by its own rules (method, path, Authorization).
Streamed = Callable[[str, str, str | None], bool]


def body_limit(path: str, authenticated: bool, streamed: bool) -> int | None:
    """The most bytes this request's body may have: 0 refuses any body, None leaves the bound to
    the route that streams it (the token upload-chunk route, bounded by the upload's declared size)."""
    if not authenticated:
        anonymous_max: int = settings.ANONYMOUS_BODY_MAX
        return anonymous_max if path in settings.ANONYMOUS_BODY_PATHS else 0
    if streamed:
        return None
    limit: int = settings.REQUEST_BODY_MAX
    return limit


async def _refuse(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            (b"connection", b"close"), *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})


def _too_large(limit: int) -> str:
    return f"request body too large: at most {limit} bytes here"


class BodyLimit:
    """The app behind it gets only bodies within their bound. What the credentials are worth and
    which routes stream their own bodies is the apps' to say (paddleweb/asgi.py passes accounts'
    and pfs' answers in): core knows no app."""

    def __init__(self, app: ASGIApp, *, authenticated: Authenticated, streamed: Streamed) -> None:
        self.app = app
        self.authenticated = authenticated
        self.streamed = streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length_h = header(scope, b"content-length")
        chunked = header(scope, b"transfer-encoding") is not None
        try:
            length = int(length_h) if length_h is not None else 0
        except ValueError:  # the server's parser already refuses these; never guess
            return await _refuse(send, 400, "invalid Content-Length")
        if not length and not chunked:
            return await self.app(scope, receive, send)

        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        authorization = header(scope, b"authorization")
        cookies = parse_cookie(header(scope, b"cookie") or "")
        authenticated = await database_sync_to_async(self.authenticated)(
            authorization, cookies.get(settings.SESSION_COOKIE_NAME))
        limit = body_limit(path, authenticated, self.streamed(scope["method"], path, authorization))
        if limit == 0:
            return await _refuse(send, 401, "Authentication credentials were not provided.",
                                 [(b"www-authenticate", b"Token")])
        if limit is None:
            return await self.app(scope, receive, send)
        if length > limit:
            return await _refuse(send, 413, _too_large(limit))
        if not chunked:
            return await self.app(scope, receive, send)  # the server never passes Content-Length
        cut = _CutOff(receive, send, limit)
        await self.app(scope, cut.receive, cut.send)
        if cut.exceeded and not cut.started:
            await _refuse(send, 413, _too_large(limit))


class _CutOff:
    """A chunked body counted as it arrives: past the limit the app sees the client leave
    (Django then drops the request) and the 413 goes out instead of whatever the app says."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive, self._send, self.limit = receive, send, limit
        self.received = 0
        self.exceeded = self.started = False

    async def receive(self) -> Message:
        if self.exceeded:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.exceeded = True
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.exceeded and not self.started:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)
