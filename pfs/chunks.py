"""Chunk operations of the legacy `paddlectl` PFS protocol (protocol-v1.md): chunk metadata with
md5, `touch` pre-creating a (sparse) file of a given size, and ranged reads and writes into an
existing file. The legacy adapter calls these; they use the same path checks and accounting."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypedDict

from . import usage
from .paths import PathError, PfsPath, resolve
from .services import _refuse_root, lstat_or_none, mkdir, put_in_place
from .storage import discard_temp, locked, sparse_temp
from .transfer import FileSpan, open_file

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MIN_CHUNK = 4 << 10
MAX_CHUNK = 32 << 20
MAX_TOUCH = 1 << 40


def _check_chunk(offset: int, chunksize: int, least: int = MIN_CHUNK) -> None:
    if not isinstance(offset, int) or offset < 0:
        raise PathError("offset must be 0 or more")
    if not isinstance(chunksize, int) or not least <= chunksize <= MAX_CHUNK:
        raise PathError(f"chunksize must be between {least} and {MAX_CHUNK} bytes")


class ChunkMeta(TypedDict):
    offset: int
    checksum: str  # md5 hex of the chunk's bytes
    len: int


def chunk_meta(user: User, path: str, offset: int, chunksize: int) -> ChunkMeta:
    """{"offset", "checksum" (md5 hex of the bytes there), "len"} for one chunk of a file."""
    _check_chunk(offset, chunksize)
    fd, st = open_file(resolve(user, path))
    h, n = hashlib.md5(usedforsecurity=False), 0
    for block in FileSpan(fd, offset, max(0, min(chunksize, st.st_size - offset))):
        h.update(block)
        n += len(block)
    return {"offset": offset, "checksum": h.hexdigest(), "len": n}


def touch(user: User, path: str, size: int) -> PfsPath:
    """Make `path` a file of `size` bytes (sparse: costs no disk until written), or resize it.
    Its apparent size counts against the quota, reserved before the file is made."""
    if not isinstance(size, int) or not 0 <= size <= MAX_TOUCH:
        raise PathError(f"filesize must be between 0 and {MAX_TOUCH} bytes")
    if path.endswith("/"):
        # `cp f /pfs/.../newdir/`: the original server could not make a file named like a
        # directory, and the client then said so; it must not become a file `newdir`.
        raise PathError(f"{path}: not a file's path (it ends in '/'); make the directory first", 400)
    p = resolve(user, path, write=True)
    _refuse_root(p, "replaced")
    if p.area == "home":
        p.root.mkdir(parents=True, exist_ok=True)  # a new user's home exists from their first write
    st = lstat_or_none(p)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise PathError(f"{p.virtual} is a directory", 409)
    if lstat_or_none(p.parent) is None:
        mkdir(user, p.parent.virtual)
    if st is not None:
        with locked(p):
            fd, st = open_file(p, write=True)
            try:
                with usage.reserve(p, size - st.st_size) as held:
                    os.ftruncate(fd, size)
                    held.settle(size - st.st_size)
            finally:
                os.close(fd)
        return p
    with usage.reserve(p, size) as held:
        name = sparse_temp(p, size)
        try:
            put_in_place(p, name, size, held)
        finally:
            discard_temp(p, name)
    return p


def write_range(user: User, path: str, offset: int, read: Callable[[int], bytes], length: int) -> int:
    """Write `length` bytes from `read` at `offset` into the existing file `path` (in place, as
    the legacy protocol works); returns the bytes written. Growing the file counts on quota:
    the growth is reserved before any byte is written."""
    _check_chunk(offset, max(length, MIN_CHUNK))
    p = resolve(user, path, write=True)
    fd, st = open_file(p, write=True)
    written = 0
    try:
        grow = max(0, offset + length - st.st_size)
        with usage.reserve(p, grow) as held:
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
                held.settle(max(0, os.fstat(fd).st_size - st.st_size))
    finally:
        os.close(fd)
    return written


def read_range(user: User, path: str, offset: int, chunksize: int) -> Iterable[bytes]:
    """The bytes of one chunk of a file (fewer at its end). Any chunksize from 1 byte: the
    client asks for a file's last chunk by the bytes that remain."""
    _check_chunk(offset, chunksize, least=1)
    fd, st = open_file(resolve(user, path))
    return FileSpan(fd, offset, max(0, min(chunksize, st.st_size - offset)))
