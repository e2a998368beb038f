"""Downloads: files stream in blocks with HTTP Range support (one range: 206 + Content-Range;
416 when unsatisfiable), directories stream as a zip built on the fly (ZIP64, so no 4 GB
limits). Works under WSGI and ASGI alike: under ASGI pfs.asgi_responses reads
each block in a worker thread (`in_threads`) instead of Django's fallback of reading the whole
response into memory first, and hands it to the server as one message (not re-sliced), so a
download costs one thread hop and one `send` per BLOCK bytes; memory stays at a block or two
per download whatever the file's size. A file's bytes (`response.file_span`) go by zero-copy
send instead when the server offers it (core.server), never entering Python at all."""

from __future__ import annotations

import asyncio
import os
import re
import stat as statmod
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.utils.http import content_disposition_header, http_date
from zipstream import ZIP_STORED, ZipStream

from launcher import fdtree

from .paths import PathError, PfsPath, open_at, resolve
from .storage import HARD_LINKED

if TYPE_CHECKING:
    from django.contrib.auth.models import User

BLOCK = 4 << 20  # bytes per read and per ASGI message

# At most 19 digits (every int64): a longer number is a malformed header, ignored, never parsed.
_RANGE = re.compile(r"^bytes=(\d{0,19})-(\d{0,19})$")


async def in_threads(blocks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A sync iterator's blocks for ASGI, each read in a worker thread as it is needed."""
    loop = asyncio.get_running_loop()
    while (part := await loop.run_in_executor(None, next, blocks, None)) is not None:
        yield part


class FileSpan:
    """`length` bytes of the open file `fd` from `start`. Iterating reads them in blocks; a
    server with zero-copy send moves them itself (pfs.asgi_fast). Owns `fd`: closed at the end
    of the iteration or by `close()` (which Django calls when the response is done)."""

    def __init__(self, fd: int, start: int, length: int, block: int = BLOCK):
        self.fd, self.start, self.length, self.block = fd, start, length, block

    def __iter__(self) -> Iterator[bytes]:
        try:
            pos, end = self.start, self.start + self.length
            while pos < end:
                data = os.pread(self.fd, min(self.block, end - pos), pos)
                if not data:
                    break  # the file shrank meanwhile
                pos += len(data)
                yield data
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SpanResponse(StreamingHttpResponse):
    """A file's bytes, with the span itself, for servers that send it zero-copy (pfs.asgi_responses)."""

    file_span: FileSpan


def coalesce(parts: Iterable[bytes], size: int = BLOCK) -> Iterator[bytes]:
    """Join small pieces into blocks of about `size` bytes (fewer thread hops per byte)."""
    buf: list[bytes] = []
    have = 0
    for part in parts:
        buf.append(part)
        have += len(part)
        if have >= size:
            yield b"".join(buf)
            buf, have = [], 0
    if buf:
        yield b"".join(buf)


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, length) for a single satisfiable `bytes=` range; None to send the whole file.
    Raises PathError(416) when the range cannot be satisfied."""
    if not header:
        return None
    m = _RANGE.match(header.strip().replace(" ", ""))
    if not m or (not m.group(1) and not m.group(2)):
        return None  # several ranges or a malformed header: RFC 9110 lets us ignore it
    first, last = m.group(1), m.group(2)
    if first:
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
        if last and int(last) < start:
            return None
    else:
        suffix = int(last)
        if suffix == 0:
            raise PathError("range not satisfiable", 416)
        start, end = max(0, size - suffix), size - 1
    if start >= size:
        raise PathError("range not satisfiable", 416)
    return start, end - start + 1


def etag(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'


def open_file(p: PfsPath, *, write: bool = False) -> tuple[int, os.stat_result]:
    """Open a checked path for reading (or writing in place), race-free below its area root and
    without following a link at its last component."""
    fd = _open(p, (os.O_RDWR if write else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return fd, _regular(p, fd)
    except BaseException:
        os.close(fd)
        raise


def _open(p: PfsPath, flags: int) -> int:
    try:  # O_NONBLOCK: opening a FIFO a job left there must not hang the server
        return p.open(flags | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        raise PathError(f"{p.virtual}: no such file or directory", 404) from None
    except OSError as e:  # ELOOP: a symbolic link at the last component
        raise PathError(f"{p.virtual}: {e.strerror}", 403) from None


def _regular(p: PfsPath, fd: int) -> os.stat_result:
    """The open file's metadata; refused unless it is a regular file of its own (see HARD_LINKED)."""
    st = os.fstat(fd)
    if not statmod.S_ISREG(st.st_mode):
        raise PathError(f"{p.virtual} is not a regular file", 409)
    if p.area == "home" and st.st_nlink > 1:
        raise PathError(f"{p.virtual}: {HARD_LINKED}", 403)
    return st


def file_response(p: PfsPath, *, range_header: str | None = None, if_range: str | None = None,
                  attachment: bool = True) -> HttpResponseBase:
    fd, st = open_file(p)
    return _file_response(p, fd, st, range_header, if_range, attachment)


def _file_response(p: PfsPath, fd: int, st: os.stat_result, range_header: str | None, if_range: str | None,
                   attachment: bool) -> HttpResponseBase:
    """The response for the open regular file `fd` (which it owns from here)."""
    tag = etag(st)
    try:
        if if_range and if_range.strip() not in (tag, http_date(st.st_mtime)):
            range_header = None  # the file changed since the client's first part
        rng = parse_range(range_header, st.st_size)
    except PathError:
        os.close(fd)
        refused = HttpResponse(status=416)
        refused["Content-Range"] = f"bytes */{st.st_size}"
        return refused
    start, length = rng if rng else (0, st.st_size)
    span = FileSpan(fd, start, length)
    resp = SpanResponse(span, status=206 if rng else 200, content_type="application/octet-stream")
    resp.file_span = span
    if rng:
        resp["Content-Range"] = f"bytes {start}-{start + length - 1}/{st.st_size}"
    resp["Content-Length"] = str(length)
    resp["Accept-Ranges"] = "bytes"
    resp["ETag"] = tag
    resp["Last-Modified"] = http_date(st.st_mtime)
    disposition = content_disposition_header(attachment, p.name)
    if disposition is not None:  # None only for an inline file without a name, which no PfsPath is
        resp["Content-Disposition"] = disposition
    return resp


def zip_stream(p: PfsPath, top: int) -> ZipStream:
    """A sized, uncompressed zip of the open directory `top` (`p`, which the zip owns); links and
    hard-linked files are left out, never followed. The tree is walked by descriptor
    (launcher.fdtree, however deep it is; it skips a directory swapped for a link) and each file
    is opened again below `top` when the zip reaches it, race-free, so a directory swapped for a
    link meanwhile leads nowhere. A file that cannot be read then, or has shrunk, is sent padded
    with zeros to its listed size: the zip stays whole and as long as announced."""
    zs = ZipStream(compress_type=ZIP_STORED, sized=True)
    try:
        for path, dir_fd, dirs, files in fdtree.walk(top):
            dirs.sort()
            rel = tuple(path) if files or not dirs else ()  # not for every level of a deep chain
            prefix = "".join(f"{part}/" for part in rel)
            if prefix and not files and not dirs:
                zs.mkdir(prefix)
            for name in sorted(files):
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if statmod.S_ISREG(st.st_mode) and (p.area != "home" or st.st_nlink == 1):
                    zs.add(_MemberBytes(top, rel + (name,), st.st_size), prefix + name, size=st.st_size)
    except BaseException:
        os.close(top)
        raise
    return zs


class _MemberBytes:
    """A zipped file's bytes, opened below the zip's top directory only when the zip reaches it,
    exactly `size` of them."""

    def __init__(self, top: int, parts: tuple[str, ...], size: int):
        self.top, self.parts, self.size = top, parts, size

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        try:
            fd = open_at(self.top, self.parts, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except (OSError, PathError):
            fd = -1  # gone, or swapped for a link, since the walk
        if fd >= 0:
            try:
                if statmod.S_ISREG(os.fstat(fd).st_mode) and os.fstat(fd).st_nlink == 1:
                    for block in FileSpan(os.dup(fd), 0, self.size):
                        sent += len(block)
                        yield block
            finally:
                os.close(fd)
        while sent < self.size:
            pad = min(BLOCK, self.size - sent)
            sent += pad
            yield bytes(pad)


class _ClosingZip:
    """The zip's bytes in blocks; closes the zip's top directory when done or dropped."""

    def __init__(self, zs: ZipStream, top: int):
        self.blocks, self.top = coalesce(zs), top

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.blocks
        finally:
            self.close()

    def close(self) -> None:
        if self.top >= 0:
            os.close(self.top)
            self.top = -1


def archive_response(p: PfsPath, top: int) -> StreamingHttpResponse:
    """A zip of the open directory `top` (owned from here)."""
    zs = zip_stream(p, top)
    resp = StreamingHttpResponse(_ClosingZip(zs, top), content_type="application/zip")
    resp["Content-Length"] = str(len(zs))
    resp["Content-Disposition"] = content_disposition_header(True, f"{p.name}.zip")
    return resp


def download(user: User, path: str, *, range_header: str | None = None,
             if_range: str | None = None) -> HttpResponseBase:
    """The response for GET of a PFS path: the file (ranges allowed) or the directory as zip.
    The path is opened once, race-free; what is sent is what was opened."""
    p = resolve(user, path)
    fd = _open(p, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if statmod.S_ISDIR(os.fstat(fd).st_mode):
            return archive_response(p, fd)
        st = _regular(p, fd)
    except BaseException:
        os.close(fd)
        raise
    return _file_response(p, fd, st, range_header, if_range, attachment=True)
