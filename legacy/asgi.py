"""The v1 chunk upload, streamed into its file in front of Django (paddleweb/asgi.py mounts it).

The compiled client uploads a file in 4 MiB chunks, each a `POST /api/v1/pfs/storage/chunks`
whose multipart body has one part, `chunk`, named by the chunk's address
(`chunksize=<n>&offset=<o>&path=<p>`). Through Django that body is read whole (spooled to a
temporary file), parsed into another temporary file and copied into the destination: three
passes over the data. Here the part's head is parsed from the first bytes,
the token and the address are checked, and the data goes into the destination at its offset as
it arrives (pfs.chunks.RangeWriter: the same path checks and quota reservation as the view
uses), written in a worker thread while the next bytes arrive, until the closing boundary.
bench/legacy_upload.py measures it against /api/v2 uploads.

Taken here: a token POST with a Content-Length and a `multipart/form-data` boundary whose body
starts with one part `chunk` carrying a filename and no headers but Content-Disposition and
Content-Type (what Go's multipart writer makes), and whose length leaves no more data than its
chunksize. Anything else goes on to the Django view with the bytes already read, so it gets the
view's answer (or, where Django cannot parse its Content-Type, Django's handler's 400). The data
ends where the boundary appears again: a closing one (`--boundary--`) completes the chunk;
another part after it, or a body that ends without one, is refused, and what came before it
stays written, as with a chunk cut off mid-way (the client compares md5s and sends it again).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import ValidationError
from django.utils.http import parse_header_parameters

from accounts.asgi import is_token
from accounts.services import user_for_token
from core.asgi_types import ASGIApp, Message, Receive, Scope, Send
from core.headers import header
from pfs.chunks import RangeWriter
from pfs.paths import PathError

from . import services

CHUNK_PATH = re.compile(r"^/api/v1/pfs/storage/chunks/?$")
HEAD_MAX = 16 << 10  # the part's head holds a whole PFS path, urlencoded
BATCH = 1 << 20  # bytes handed to one write in a worker thread while the next arrive
NO_END = "the chunk's body does not end with its closing boundary"


class LegacyChunks:
    """The v1 chunk-upload route in front of `app`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path, root = scope["path"], scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            auth = header(scope, b"authorization")
            if CHUNK_PATH.match(path) and auth is not None and is_token(auth):
                try:
                    boundary = _boundary(header(scope, b"content-type"))
                except ValueError:  # `boundary*=bogus''x`: Django's handler answers it 400 (core/asgi_django.py)
                    boundary = None
                if boundary and (header(scope, b"content-length") or "").isdigit():
                    await _chunk(self.app, scope, receive, send, auth, boundary)
                    return
        await self.app(scope, receive, send)


def _boundary(content_type: str | None) -> bytes | None:
    """The multipart boundary of a chunk upload's Content-Type, None for another type; ValueError
    where Django's parser refuses the header."""
    if not content_type:
        return None
    kind, params = parse_header_parameters(content_type)
    boundary = params.get("boundary", "")
    if kind != "multipart/form-data" or not 0 < len(boundary) <= 70 or not boundary.isascii():
        return None
    return boundary.encode()


def _part_head(buf: bytes, boundary: bytes) -> tuple[str, int] | None:
    """(filename, where the data starts) when `buf` begins with the part `chunk` as the client
    writes it; None for any other layout (Django's parser takes those)."""
    first = b"--" + boundary + b"\r\n"
    end = buf.find(b"\r\n\r\n", len(first) - 2)
    if not buf.startswith(first) or end < 0:
        return None
    filename = None
    for line in buf[len(first):end].split(b"\r\n"):
        name, colon, value = line.partition(b":")
        name = name.strip().lower()
        if not colon or name not in (b"content-disposition", b"content-type"):
            return None
        if name == b"content-disposition":
            try:
                kind, params = parse_header_parameters(value.decode())
            except ValueError:  # not UTF-8 (UnicodeDecodeError), or an RFC 2231 encoding Python does not know
                return None
            if kind != "form-data" or params.get("name") != "chunk" or "filename" not in params:
                return None
            filename = params["filename"]
    return (filename, end + 4) if filename is not None else None


class _Body:
    """The request body from `receive()`, with what was read before handed out first."""

    def __init__(self, receive: Receive) -> None:
        self._receive, self.buffered, self.more = receive, b"", True
        self.disconnected = self._replayed_end = False

    async def next(self) -> bytes:
        if self.buffered:
            piece, self.buffered = self.buffered, b""
            return piece
        if not self.more:
            return b""
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.disconnected, self.more = True, False
            return b""
        self.more = message.get("more_body", False)
        body: bytes = message.get("body", b"")
        return body

    async def replay(self) -> Message:
        """receive() for an app that gets the whole body, the bytes read here first; after the
        body, the server's own (which tells of a disconnect)."""
        if self.buffered or not (self.more or self._replayed_end):
            piece, self.buffered = self.buffered, b""
            self._replayed_end = not self.more
            return {"type": "http.request", "body": piece, "more_body": self.more}
        return await self._receive()


class _NoUser(Exception):
    """The token stands for no active user (revoked since core.body_limits checked it)."""


# what the view's `endpoint` answers with the protocol's refusal
REFUSALS = (PathError, services.LegacyError, ValidationError)


def _open(auth: str, path: str, offset: int, length: int) -> RangeWriter:
    """The chunk's writer for the token's user (runs in the request's database thread)."""
    user = user_for_token(auth)
    if user is None:
        raise _NoUser
    return RangeWriter(user, path, offset, length)


def _refused(exc: Exception) -> dict[str, Any]:
    return {"err": services.error_text(exc)[1] or "refused", "results": None}


async def _answer(send: Send, body: dict[str, Any], close: bool = False, status: int = 200,
                  headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    payload = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
            (b"x-content-type-options", b"nosniff"), *headers]
    if close:  # refused before the body was read: the server stops reading it
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": payload})


async def _chunk(app: ASGIApp, scope: Scope, receive: Receive, send: Send, auth: str, boundary: bytes) -> None:
    length = int(header(scope, b"content-length") or 0)
    body = _Body(receive)
    head = b""
    while body.more and b"\r\n\r\n" not in head and len(head) < HEAD_MAX:
        head += await body.next()
    body.buffered = head
    found = _part_head(head, boundary)
    if body.disconnected:
        return
    if found is None:
        await app(scope, body.replay, send)
        return
    filename, start = found
    delimiter = b"\r\n--" + boundary
    try:
        path, offset, chunksize = services.chunk_target(filename)
    except PathError as e:
        await _answer(send, _refused(e), close=True)
        return
    data = length - start - len(delimiter) - 4  # as the client ends the body: delimiter, "--\r\n"
    if data > chunksize:  # too big, or a longer ending (an epilogue): the view parses it exactly
        await app(scope, body.replay, send)
        return
    body.buffered = head[start:]
    async with ThreadSensitiveContext():
        await signals.request_started.asend(sender=LegacyChunks, scope=scope)
        try:
            try:
                # up to 2 bytes more than `data`: a body may end without the last CRLF
                writer = await sync_to_async(_open, thread_sensitive=True)(auth, path, offset,
                                                                           min(chunksize, max(0, data + 2)))
            except _NoUser:  # as the view's `endpoint` answers it
                await _answer(send, {"detail": "Authentication credentials were not provided."}, close=True,
                              status=401, headers=((b"www-authenticate", b"Token"),))
                return
            except REFUSALS as e:
                await _answer(send, _refused(e), close=True)
                return
            try:
                outcome = await _pump(body, writer, delimiter)
            except PathError as e:  # more data than the body's length leaves room for, or refused meanwhile
                await _answer(send, {"err": NO_END, "results": None} if e.status == 400 else _refused(e), close=True)
                return
            finally:
                await sync_to_async(writer.finish, thread_sensitive=True)()
            if body.disconnected:
                return
            if outcome is None:
                await _answer(send, {"err": "", "results": {"offset": offset, "len": writer.written}})
            else:
                await _answer(send, {"err": outcome, "results": None})
        finally:
            await signals.request_finished.asend(sender=LegacyChunks)


async def _pump(body: _Body, writer: RangeWriter, delimiter: bytes) -> str | None:
    """Write the part's data (up to the next delimiter) through `writer`, one batch in a worker
    thread while the next arrives; then read the rest of the body. None when the part ended with
    the closing boundary, else why not."""
    loop = asyncio.get_running_loop()
    carry = b""  # held back: it may be the start of a delimiter split across reads
    batch: list[bytes | memoryview] = []
    have = 0
    pending = None
    after: bytes | None = None  # the bytes after the delimiter, once it is found
    try:
        while after is None:
            piece = await body.next()
            if not piece:
                if not body.more:
                    break
                continue
            carry, after, added = _scan(piece, carry, delimiter, batch)
            have += added
            if have >= BATCH or after is not None:
                if pending is not None:
                    await pending
                pending = loop.run_in_executor(None, writer.write, batch)
                batch, have = [], 0
        if pending is not None:
            await pending
            pending = None
        if batch:  # the body ended (or the client left) before a delimiter: what came is written
            await loop.run_in_executor(None, writer.write, batch)
    except BaseException:
        if pending is not None:
            await asyncio.shield(pending)  # never leave a write running on a closed file
        raise
    return await _ending(body, after)


def _scan(piece: bytes, carry: bytes, delimiter: bytes,
          batch: list[bytes | memoryview]) -> tuple[bytes, bytes | None, int]:
    """The next `piece` of the body, after what was held back of the one before (`carry`), split at
    the delimiter: its data appended to `batch`. Returns what to hold back now, the bytes after the
    delimiter once it is found (else None), and how many bytes of data were appended."""
    keep = len(delimiter) - 1  # the most of a delimiter that one read can end with
    after = None
    added = 0
    if carry:  # a delimiter that starts in `carry`, else `carry` is data
        joint = carry + piece[:keep]
        at = joint.find(delimiter)
        if 0 <= at < len(carry):
            batch.append(carry[:at])
            after = joint[at + len(delimiter):] + piece[keep:keep + 2]
        else:
            batch.append(carry)
        added += len(batch[-1])
        carry = b""
    if after is None:
        view = memoryview(piece)
        at = piece.find(delimiter)
        if at >= 0:
            batch.append(view[:at])
            after = piece[at + len(delimiter):at + len(delimiter) + 2]
        else:
            cut = max(0, len(piece) - keep)
            batch.append(view[:cut])
            carry = piece[cut:]
        added += len(batch[-1])
    return carry, after, added


async def _ending(body: _Body, after: bytes | None) -> str | None:
    """Read the rest of the body after the part's data: None when the part ended with the
    closing boundary, else why not."""
    if after is None:
        return NO_END
    while len(after) < 2 and body.more:
        after += await body.next()
    while body.more:  # the epilogue, if any: read and dropped
        await body.next()
    if not after.startswith(b"--"):
        return "the chunk's body must hold one part, 'chunk'"
    return None
