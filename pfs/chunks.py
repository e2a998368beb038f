"""Chunk operations of the legacy `paddlectl` PFS protocol (protocol-v1.md): chunk metadata with
md5, `touch` pre-creating a (sparse) file of a given size, and ranged reads and writes into an
existing file. The legacy adapter calls these; they use the same path checks and accounting."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable

from . import usage
from .paths import PathError, PfsPath, resolve
from .services import _refuse_root, mkdir, put_in_place
from .storage import locked, sparse_temp
from .transfer import FileSpan, open_file

MIN_CHUNK = 4 << 10
MAX_CHUNK = 32 << 20
MAX_TOUCH = 1 << 40


def _check_chunk(offset: int, chunksize: int) -> None:
    if not isinstance(offset, int) or offset < 0:
        raise PathError("offset must be 0 or more")
    if not isinstance(chunksize, int) or not MIN_CHUNK <= chunksize <= MAX_CHUNK:
        raise PathError(f"chunksize must be between {MIN_CHUNK} and {MAX_CHUNK} bytes")


def chunk_meta(user, path: str, offset: int, chunksize: int) -> dict:
    """{"offset", "checksum" (md5 hex of the bytes there), "len"} for one chunk of a file."""
    _check_chunk(offset, chunksize)
    fd, st = open_file(resolve(user, path))
    h, n = hashlib.md5(usedforsecurity=False), 0
    for block in FileSpan(fd, offset, max(0, min(chunksize, st.st_size - offset))):
        h.update(block)
        n += len(block)
    return {"offset": offset, "checksum": h.hexdigest(), "len": n}


def touch(user, path: str, size: int) -> PfsPath:
    """Make `path` a file of `size` bytes (sparse: costs no disk until written), or resize it."""
    if not isinstance(size, int) or not 0 <= size <= MAX_TOUCH:
        raise PathError(f"filesize must be between 0 and {MAX_TOUCH} bytes")
    p = resolve(user, path, write=True)
    _refuse_root(p, "replaced")
    if os.path.isdir(p.disk):
        raise PathError(f"{p.virtual} is a directory", 409)
    if not p.parent.disk.is_dir():
        mkdir(user, p.parent.virtual)
    old = p.disk.stat().st_size if p.disk.is_file() else 0
    usage.check_room(p, size, replaced_bytes=old)
    if os.path.lexists(p.disk):
        with locked(p):
            fd, st = open_file(p)
            os.close(fd)
            fd = p.open(os.O_WRONLY | os.O_NOFOLLOW)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
            usage.adjust(p, size - st.st_size)
        return p
    tmp = sparse_temp(p, size)
    try:
        put_in_place(p, tmp, size)
    finally:
        tmp.unlink(missing_ok=True)
    return p


def write_range(user, path: str, offset: int, read: Callable[[int], bytes], length: int) -> int:
    """Write `length` bytes from `read` at `offset` into the existing file `path` (in place, as
    the legacy protocol works); returns the bytes written. Growing the file counts on quota."""
    _check_chunk(offset, max(length, MIN_CHUNK))
    p = resolve(user, path, write=True)
    fd, st = open_file(p)
    os.close(fd)
    grow = max(0, offset + length - st.st_size)
    if grow:
        usage.check_room(p, grow)
    fd = p.open(os.O_WRONLY | os.O_NOFOLLOW)
    written = 0
    try:
        while written < length:
            block = read(min(1 << 20, length - written))
            if not block:
                raise PathError(f"the chunk ended {length - written} bytes early", 400)
            view = memoryview(block)
            while view:
                n = os.pwrite(fd, view, offset + written)
                written += n
                view = view[n:]
    finally:
        os.close(fd)
        if grow:
            usage.adjust(p, max(0, offset + written - st.st_size))
    return written


def read_range(user, path: str, offset: int, chunksize: int) -> Iterable[bytes]:
    """The bytes of one chunk of a file (fewer at its end)."""
    _check_chunk(offset, chunksize)
    fd, st = open_file(resolve(user, path))
    return FileSpan(fd, offset, max(0, min(chunksize, st.st_size - offset)))
