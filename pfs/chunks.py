"""Chunk operations of the legacy `paddlectl` PFS protocol (protocol-v1.md): chunk metadata with
md5, `touch` pre-creating a (sparse) file of a given size, and ranged reads and writes into an
existing file. The legacy adapter calls these; they use the same path checks and accounting."""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import stat
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypedDict

from . import usage
from .paths import PathError, PfsPath, resolve
from .services import _refuse_root, lstat_or_none, mkdir, put_in_place
from .storage import discard_temp, holding, locked, open_lock, sparse_temp
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
    """{"offset", "checksum" (md5 hex of the bytes there), "len"} for one chunk of a file. A
    chunk that is all hole (a file `touch` just made, before its chunks arrive: what every
    upload asks about first) is known to be zeros without reading it."""
    _check_chunk(offset, chunksize)
    fd, st = open_file(resolve(user, path))
    length = max(0, min(chunksize, st.st_size - offset))
    if length and _all_hole(fd, offset, length):
        os.close(fd)
        return {"offset": offset, "checksum": _zeros_md5(length), "len": length}
    h, n = hashlib.md5(usedforsecurity=False), 0
    for block in FileSpan(fd, offset, length):
        h.update(block)
        n += len(block)
    return {"offset": offset, "checksum": h.hexdigest(), "len": n}


def _all_hole(fd: int, offset: int, length: int) -> bool:
    """Whether [offset, offset+length) of the file holds no data (reads as zeros). False where
    the filesystem cannot say (no SEEK_DATA)."""
    try:
        return os.lseek(fd, offset, os.SEEK_DATA) >= offset + length
    except OSError as e:
        return e.errno == errno.ENXIO  # no data at or after offset


@functools.lru_cache(maxsize=8)
def _zeros_md5(length: int) -> str:
    return hashlib.md5(bytes(length), usedforsecurity=False).hexdigest()


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
    with usage.reserve(p, size) as held:  # first: a refused touch makes no directories either
        if lstat_or_none(p.parent) is None:
            mkdir(user, p.parent.virtual)
        name = sparse_temp(p, size)
        try:
            put_in_place(p, name, size, held)
        finally:
            discard_temp(p, name)
    return p


class RangeWriter:
    """One chunk written in place at `offset` into the existing file `path` (as the legacy
    protocol works): opened first (path checked, room for up to `length` bytes of growth
    reserved against the quota before any byte is written), then fed blocks in order (`write`,
    from any thread), then `finish`ed, which counts what the file grew by. Bytes written stay
    written, even by a chunk cut off mid-way: the client compares md5s and sends it again.

    A chunk inside the file (the client `touch`es it to its full size first) needs no room, so
    it takes no reservation, and its writes cost no database write. Each batch is written under
    the lock a touch resizes files under (storage.locked), its growth measured there: a touch
    that shrinks the file while a chunk arrives is credited once, and what the chunk grows it
    back by is reserved (or refused) and counted here."""

    def __init__(self, user: User, path: str, offset: int, length: int):
        _check_chunk(offset, max(length, MIN_CHUNK))
        self.target = resolve(user, path, write=True)
        self.fd, st = open_file(self.target, write=True)
        grow = max(0, offset + length - st.st_size)
        self.lock_fd = -1
        try:
            self.lock_fd = open_lock(self.target)  # once: every batch is written under it
            self.held = usage.reserve(self.target, grow) if grow else None
        except BaseException:
            os.close(self.fd)
            if self.lock_fd >= 0:
                os.close(self.lock_fd)
            raise
        self.start, self.pos, self.length = offset, offset, length
        self.grown = 0  # what this chunk's writes added to the file's size

    def write(self, blocks: Iterable[bytes | memoryview]) -> None:
        """Write `blocks` contiguously at the current position (short writes resumed)."""
        views = [memoryview(block) for block in blocks]
        end = self.pos + sum(len(view) for view in views)
        if end > self.start + self.length:
            raise PathError(f"the chunk has more than its {self.length} bytes")
        with holding(self.lock_fd):
            before = os.fstat(self.fd).st_size
            if end > before:
                self._hold(self.grown + end - before)
            try:
                for view in views:
                    while view:
                        n = os.pwrite(self.fd, view, self.pos)
                        self.pos += n
                        view = view[n:]
            finally:
                self.grown += max(0, os.fstat(self.fd).st_size - before)

    def _hold(self, total: int) -> None:
        if self.held is None:
            self.held = usage.reserve(self.target, total)
        else:
            self.held.ensure(total)

    @property
    def written(self) -> int:
        return self.pos - self.start

    def finish(self) -> int:
        """Count the file's growth on the quota, close it; the bytes written."""
        if self.fd < 0:
            return self.written
        try:
            if self.held is not None:  # grown is 0 without one
                self.held.settle(self.grown)
        finally:
            os.close(self.fd)
            os.close(self.lock_fd)
            self.fd = -1
        return self.written


def write_range(user: User, path: str, offset: int, read: Callable[[int], bytes], length: int) -> int:
    """Write `length` bytes from `read` at `offset` into the existing file `path`; returns the
    bytes written (RangeWriter)."""
    writer = RangeWriter(user, path, offset, length)
    try:
        while writer.written < length:
            block = read(min(1 << 20, length - writer.written))
            if not block:
                raise PathError(f"the chunk ended {length - writer.written} bytes early", 400)
            writer.write([block])
    finally:
        writer.finish()
    return writer.written


def read_range(user: User, path: str, offset: int, chunksize: int) -> FileSpan:
    """The bytes of one chunk of a file (fewer at its end). Any chunksize from 1 byte: the
    client asks for a file's last chunk by the bytes that remain."""
    _check_chunk(offset, chunksize, least=1)
    fd, st = open_file(resolve(user, path))
    return FileSpan(fd, offset, max(0, min(chunksize, st.st_size - offset)))
