"""The ASGI entry for HTTP (paddleweb/asgi.py mounts it): Django, plus a streaming path for
upload chunks that Django's ASGI handler cannot stream, spliced to disk where the server offers
that (core.server, which the Procfile runs).

Why: Django's ASGI handler reads a whole request body (spooled to a temporary file past 2.5 MB)
before any view runs, and the view then copies it again into the upload's part file; for a
64 MiB chunk that is two full passes over the data and a stall before the first byte is
stored.

What is handled here, and nothing else:

* `PATCH /api/v2/uploads/<id>/` carrying `Authorization: Token <key>` (paddlectl, scripts) is
  served by `patch_chunk` below without Django's request/response cycle. The body goes into
  the upload's part file at its offset: spliced there by the server (`paddlecloud.body_to_file`,
  no copy through Python) when it offers that and the chunk has no checksum to verify;
  otherwise from the server's `receive()` messages, coalesced into batches of `BATCH` bytes
  written with one `pwritev` each in a worker thread while the next batch arrives (at most
  two batches in memory per request; blocks of zeros become holes). Everything that decides
  *whether* to write is the same code the Django view uses: knox's `TokenAuthentication`
  (hashed token lookup, expiry, inactive users), `pfs.uploads.get` (another user's or an
  unknown upload is 404), and `pfs.uploads.ChunkWriter`, which re-resolves the destination
  through pfs.paths, checks the lock, the offset (409 with the current
  offset), the declared size (413), the per-chunk checksum (460, chunk discarded) and
  completes the upload (size, whole-file digest, atomic rename, usage accounting). The
  whole file's digest is computed as the chunk lands: spliced bytes are read back piece by
  piece from the page cache by a thread that follows the splice's (`ChunkWriter.stored`). The quota
  was reserved when the upload was created (pfs.uploads.create). Answers are the same JSON as
  the DRF view's (`UploadSerializer`, `{"detail": ...}` errors, `Upload-Offset` header). A
  refusal found before the body is read (bad token, unknown upload, wrong offset) is answered
  without reading the body. Session (cookie) requests — the browser's file manager — and
  requests without a token keep going through Django and DRF unchanged, CSRF checks included.

* `PUT /api/v2/files/content/` (a one-shot upload) whose declared Content-Length is more than
  the caller's free storage quota (or the 64 MiB one-shot limit) is answered 413 "quota
  exceeded: used X of Y" from the request head, before any byte of the body is read
  (`_put_refusal`); every other PUT goes on to Django, which reserves the bytes before writing.

* All other HTTP goes to Django; how its file bodies are sent (zero-copy where the server
  offers it, large messages) is pfs/asgi_responses.py.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals

from accounts.asgi import is_token
from core.asgi_types import ASGIApp, Headers, Receive, Scope, Send
from core.headers import header
from core.server import BODY_TO_FILE

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from .paths import PathError
    from .uploads import ChunkWriter

UPLOAD_CHUNK_PATH = re.compile(r"^/api/v2/uploads/(?P<id>[^/]+)/$")
CONTENT_PATH = "/api/v2/files/content/"
BATCH = 4 << 20  # bytes handed to one pwritev; two batches at most are held per request


def streams_body(method: str, path: str, authorization: str | None) -> bool:
    """Whether this request's body is streamed here (core.body_limits leaves its bound to us: the
    upload's declared size)."""
    return (method == "PATCH" and UPLOAD_CHUNK_PATH.match(path) is not None and authorization is not None
            and is_token(authorization))


class PfsASGI:
    """The HTTP application: the streaming upload-chunk route and the early quota answer to a
    one-shot upload in front of Django."""

    def __init__(self, django_app: ASGIApp) -> None:
        self.django = django_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("PATCH", "PUT"):
            path, root = scope["path"], scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            m = UPLOAD_CHUNK_PATH.match(path) if scope["method"] == "PATCH" else None
            if m:
                auth = header(scope, b"authorization")
                if auth is not None and is_token(auth):
                    await patch_chunk(scope, receive, send, m.group("id"), auth)
                    return
            elif scope["method"] == "PUT" and path == CONTENT_PATH:
                async with ThreadSensitiveContext():
                    refused = await sync_to_async(_put_refusal, thread_sensitive=True)(scope)
                if refused is not None:
                    await _respond(send, refused.status, refused.body, [(b"connection", b"close")])
                    return
        await self.django(scope, receive, send)


def _put_refusal(scope: Scope) -> _Refused | None:
    """413 for a one-shot upload (`PUT /api/v2/files/content/`) whose declared Content-Length
    does not fit the caller's free quota (or the size limit), decided from the head alone, so
    the body is never read. Anything else (no credentials, a bad path...) is left to Django,
    which answers it as usual. Runs in a database thread."""
    from django.conf import settings
    from django.db import close_old_connections

    from . import services, usage
    from .paths import PathError, resolve

    try:
        length = int(header(scope, b"content-length") or "")
    except ValueError:
        return None
    user = _user(scope)
    if user is None:
        return None
    try:
        if length > settings.PFS_MAX_CHUNK:
            raise PathError(f"at most {settings.PFS_MAX_CHUNK} bytes in one request: use /api/v2/uploads/", 413)
        target = resolve(user, parse_qs(scope.get("query_string", b"").decode("latin-1")).get("path", [""])[0],
                         write=True)
        if target.area != "home":
            return None
        u = usage.get_usage(user, target.datacenter)
        if length > u.free_bytes + services.counted_size(services.lstat_or_none(target)):
            raise usage.QuotaExceeded(u.used_bytes + u.reserved_bytes, u.limit_bytes)
    except PathError as e:
        return _Refused(e.status, {"detail": e.message}) if e.status == 413 else None
    finally:
        close_old_connections()  # as at a request's end: back to the pool (PostgreSQL), kept (SQLite)
    return None


def _user(scope: Scope) -> User | None:
    """The active user the request's token or session cookie stands for, or None."""
    from importlib import import_module
    from types import SimpleNamespace

    from django.conf import settings
    from django.contrib import auth
    from django.http.cookie import parse_cookie

    from accounts.services import user_for_token

    authorization = header(scope, b"authorization")
    if authorization is not None and is_token(authorization):
        return user_for_token(authorization)
    key = parse_cookie(header(scope, b"cookie") or "").get(settings.SESSION_COOKIE_NAME)
    if not key:
        return None
    # get_user reads only the request's session
    user = auth.get_user(SimpleNamespace(  # type: ignore[arg-type]
        session=import_module(settings.SESSION_ENGINE).SessionStore(key)))
    return user if user.is_authenticated else None


class _Refused(Exception):
    def __init__(self, status: int, body: dict[str, Any], headers: Headers | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or []


def _start(auth: str, upload_id: str, offset_h: str | None, length_h: str | None,
           checksum_h: str | None, sha256_h: str | None, crc32c_h: str | None) -> ChunkWriter:
    """Authenticate, find the upload and open the chunk (the view's checks, in its order).
    Runs in the request's database thread."""
    from rest_framework.exceptions import AuthenticationFailed

    from accounts.auth import TokenAuthentication
    from accounts.services import TokenHeader

    from . import upload_headers, uploads
    from .paths import PathError

    try:
        found = TokenAuthentication().authenticate(TokenHeader(auth))
    except AuthenticationFailed as e:
        raise _Refused(401, {"detail": str(e.detail)}, [(b"www-authenticate", b"Token")]) from None
    if found is None:  # not reached: the route only takes Token headers
        raise _Refused(401, {"detail": "Authentication credentials were not provided."})
    user = found[0]
    try:
        session = uploads.get(user, upload_id)
        offset = upload_headers.parse_offset(offset_h)
        try:
            length = int(length_h)  # type: ignore[arg-type]
            if length < 0:
                raise ValueError
        except (TypeError, ValueError):
            raise PathError("Content-Length is required (chunked request bodies are not accepted)", 411) from None
        checksum = upload_headers.parse_checksum(checksum_h)
        digest = upload_headers.parse_digest(sha256_h, crc32c_h)
        return uploads.ChunkWriter(session, offset, length, checksum, bounded=False, digest=digest)
    except PathError as e:
        raise _refusal(e) from None


def _refusal(e: PathError) -> _Refused:
    from . import uploads

    body: dict[str, Any] = {"detail": e.message}
    headers: Headers = []
    if isinstance(e, uploads.OffsetConflict):
        body["offset"] = e.offset
        headers.append((b"upload-offset", str(e.offset).encode()))
    return _Refused(e.status, body, headers)


def _finish(writer: ChunkWriter) -> tuple[int, dict[str, Any], Headers]:
    """Verify and close the chunk (completing the upload at its last byte); the answer."""
    from .api.serializers import UploadSerializer
    from .paths import PathError

    session = writer.session
    try:
        writer.finish()
        session.refresh_from_db()
        data = UploadSerializer(session).data
    except PathError as e:
        raise _refusal(e) from None
    return 200, data, [(b"upload-offset", str(data["offset"]).encode()),
                       (b"upload-length", str(session.size).encode()),
                       (b"cache-control", b"no-store")]


async def _respond(send: Send, status: int, body: dict[str, Any], headers: Headers) -> None:
    from rest_framework.renderers import JSONRenderer

    payload = JSONRenderer().render(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            (b"x-content-type-options", b"nosniff"),
                            (b"vary", b"Accept, Authorization"), *headers]})
    await send({"type": "http.response.body", "body": payload})


async def _pump(receive: Receive, writer: ChunkWriter) -> None:
    """Feed the request body to `writer` in batches, writing one batch in a worker thread while
    the next arrives. Stops at the body's end or when the client goes away (the writer then
    holds what arrived; `finish` reports the chunk short)."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[None] | None = None
    batch: list[bytes] = []
    have = 0
    more = True
    try:
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                more = False
            else:
                body = message.get("body", b"")
                if body:
                    batch.append(body)
                    have += len(body)
                more = message.get("more_body", False)
            if batch and (have >= BATCH or not more):
                if pending is not None:
                    await pending
                pending = loop.run_in_executor(None, writer.write, batch)
                batch, have = [], 0
    finally:
        if pending is not None:
            await asyncio.shield(pending)  # never leave a write running on a closed file


async def patch_chunk(scope: Scope, receive: Receive, send: Send, upload_id: str, auth: str) -> None:
    """`PATCH /api/v2/uploads/<id>/` with a token: the chunk streamed to disk as it arrives."""
    from .paths import PathError

    async with ThreadSensitiveContext():
        await signals.request_started.asend(sender=PfsASGI, scope=scope)
        try:
            db = sync_to_async(_start, thread_sensitive=True)
            try:
                writer = await db(auth, upload_id, header(scope, b"upload-offset"),
                                  header(scope, b"content-length"), header(scope, b"upload-checksum"),
                                  header(scope, b"upload-sha256"), header(scope, b"upload-crc32c"))
            except _Refused as r:
                await _respond(send, r.status, r.body, r.headers)
                return
            try:
                splice = scope.get("extensions", {}).get(BODY_TO_FILE)
                if splice is not None and writer.hash is None:
                    # the whole file's running hash (if any) follows the splice piece by piece
                    stored = writer.stored if writer.running is not None else None
                    writer.advance(await splice["splice"](writer.fd, writer.pos, writer.length, stored))
                else:
                    await _pump(receive, writer)
            except PathError as e:  # not expected: the size was checked against Content-Length
                writer.abort()
                refused = _refusal(e)
                await _respond(send, refused.status, refused.body, refused.headers)
                return
            except BaseException:
                writer.abort()
                raise
            try:
                status, body, headers = await sync_to_async(_finish, thread_sensitive=True)(writer)
            except _Refused as r:
                status, body, headers = r.status, r.body, r.headers
            await _respond(send, status, body, headers)
        finally:
            await signals.request_finished.asend(sender=PfsASGI)
