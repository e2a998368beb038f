"""Downloads: files stream in blocks with HTTP Range support (one range: 206 + Content-Range;
416 when unsatisfiable), directories stream as a zip built on the fly (ZIP64, so no 4 GB
limits). Works under WSGI and ASGI alike: under ASGI pfs.asgi_fast.LargeChunkASGIHandler reads
each block in a worker thread (`in_threads`) instead of Django's fallback of reading the whole
response into memory first, and hands it to the server as one message (not re-sliced), so a
download costs one thread hop and one `send` per BLOCK bytes; memory stays at a block or two
per download whatever the file's size. A file's bytes (`response.file_span`) go by zero-copy
send instead when the server offers it (paddleweb.server), never entering Python at all."""

from __future__ import annotations

import asyncio
import os
import re
import stat as statmod
from collections.abc import AsyncIterator, Iterable, Iterator

from django.http import HttpResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header, http_date
from zipstream import ZIP_STORED, ZipStream

from .paths import PathError, PfsPath, resolve

BLOCK = 4 << 20  # bytes per read and per ASGI message
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


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


def open_file(p: PfsPath) -> tuple[int, os.stat_result]:
    """Open a checked path for reading, race-free below its area root and without following a
    link at its last component."""
    try:
        fd = p.open(os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        raise PathError(f"{p.virtual}: no such file or directory", 404) from None
    except OSError as e:  # ELOOP: a symbolic link at the last component
        raise PathError(f"{p.virtual}: {e.strerror}", 403) from None
    st = os.fstat(fd)
    if not statmod.S_ISREG(st.st_mode):
        os.close(fd)
        raise PathError(f"{p.virtual} is not a regular file", 409)
    return fd, st


def file_response(p: PfsPath, *, range_header: str | None = None, if_range: str | None = None,
                  attachment: bool = True) -> HttpResponse:
    fd, st = open_file(p)
    tag = etag(st)
    try:
        if if_range and if_range.strip() not in (tag, http_date(st.st_mtime)):
            range_header = None  # the file changed since the client's first part
        rng = parse_range(range_header, st.st_size)
    except PathError:
        os.close(fd)
        resp = HttpResponse(status=416)
        resp["Content-Range"] = f"bytes */{st.st_size}"
        return resp
    start, length = rng if rng else (0, st.st_size)
    span = FileSpan(fd, start, length)
    resp = StreamingHttpResponse(span, status=206 if rng else 200, content_type="application/octet-stream")
    resp.file_span = span
    if rng:
        resp["Content-Range"] = f"bytes {start}-{start + length - 1}/{st.st_size}"
    resp["Content-Length"] = str(length)
    resp["Accept-Ranges"] = "bytes"
    resp["ETag"] = tag
    resp["Last-Modified"] = http_date(st.st_mtime)
    resp["Content-Disposition"] = content_disposition_header(attachment, p.name)
    return resp


def zip_stream(p: PfsPath) -> ZipStream:
    """A sized, uncompressed zip of the directory `p`; links are left out, never followed.
    The tree is walked by descriptor and each file opened race-free when its bytes are sent,
    so a directory swapped for a link meanwhile leads nowhere."""
    zs = ZipStream(compress_type=ZIP_STORED, sized=True)
    top = p.open(os.O_RDONLY | os.O_DIRECTORY)
    try:
        for root, dirs, files, root_fd in os.fwalk(".", dir_fd=top):
            dirs[:] = sorted(d for d in dirs if _is(statmod.S_ISDIR, d, root_fd))
            rel = tuple(part for part in root.split("/") if part != ".")
            prefix = "".join(f"{part}/" for part in rel)
            if prefix and not files and not dirs:
                zs.mkdir(prefix)
            for name in sorted(files):
                try:
                    st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if statmod.S_ISREG(st.st_mode):
                    member = PfsPath(p.datacenter, p.area, p.owner, p.parts + rel + (name,))
                    zs.add(_MemberBytes(member, st.st_size), prefix + name, size=st.st_size)
    finally:
        os.close(top)
    return zs


def _is(kind, name: str, dir_fd: int) -> bool:
    try:
        return kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


class _MemberBytes:
    """A zipped file's bytes, opened only when the zip reaches it."""

    def __init__(self, p: PfsPath, size: int):
        self.p, self.size = p, size

    def __iter__(self) -> Iterator[bytes]:
        return iter(FileSpan(self.p.open(os.O_RDONLY | os.O_NOFOLLOW), 0, self.size))


def archive_response(p: PfsPath) -> HttpResponse:
    zs = zip_stream(p)
    resp = StreamingHttpResponse(coalesce(zs), content_type="application/zip")
    resp["Content-Length"] = str(len(zs))
    resp["Content-Disposition"] = content_disposition_header(True, f"{p.name}.zip")
    return resp


def download(user, path: str, *, range_header: str | None = None, if_range: str | None = None) -> HttpResponse:
    """The response for GET of a PFS path: the file (ranges allowed) or the directory as zip."""
    p = resolve(user, path)
    if os.path.isdir(p.disk) and not os.path.islink(p.disk):
        return archive_response(p)
    return file_response(p, range_header=range_header, if_range=if_range)
