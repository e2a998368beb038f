"""The whole file's digest of a resumable upload (sha256 or crc32c), computed as its bytes arrive
rather than read back after the last one: at 1 GiB that read-back was most of a second after the
transfer ended.

Each web process keeps the running hash of the uploads it is receiving, with how many bytes it
covers. A chunk takes its upload's hash (the part file's lock makes it the only writer), feeds it
what it writes, and puts it back when it ends. Where the process has none at the chunk's offset
(the upload went on in another process, or this one restarted), the part file is hashed up to the
offset first: correct everywhere, and read back only after such a move.

crc32c (google-crc32c's C code, the library Google's storage clients check whole objects with)
costs about a tenth of sha256's CPU per byte here: 0.1 against 0.7 s per GiB, which is most of
what an upload of a large file costs the server beyond the copy (docs/operating/performance.md).
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections import OrderedDict
from typing import Protocol

import google_crc32c

READ = 4 << 20  # bytes read back at a time where the hash must catch up with the file
LAG = 8 << 20  # bytes a Follower may fall behind the splice: what a chunk's end waits for
KEEP = 256  # running hashes kept per process (a few hundred bytes each); the oldest go first


class Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


class Crc32c:
    """hashlib's interface to google-crc32c's CRC-32C; hexdigest() is the CRC as a big-endian
    number in 8 hex digits. Its C function takes bytes only (a memoryview is refused)."""

    def __init__(self) -> None:
        self._crc = 0

    def update(self, data: bytes, /) -> None:
        self._crc = int(google_crc32c.extend(self._crc, data))

    def hexdigest(self) -> str:
        return f"{self._crc:08x}"


def new(algorithm: str) -> Hash:
    """An empty running hash of `algorithm` ("sha256" or "crc32c")."""
    return Crc32c() if algorithm == "crc32c" else hashlib.sha256()


_running: OrderedDict[uuid.UUID, tuple[int, Hash]] = OrderedDict()
_lock = threading.Lock()


def take(upload: uuid.UUID, algorithm: str, fd: int, offset: int) -> Hash:
    """The `algorithm` hash of the first `offset` bytes of the upload whose part file is open in
    `fd` (readable): this process's running hash when it is at `offset`, else read from the file."""
    with _lock:
        kept = _running.pop(upload, None)
    if kept is not None and kept[0] == offset:
        return kept[1]
    h = new(algorithm)
    hash_file(h, fd, 0, offset)
    return h


def keep(upload: uuid.UUID, pos: int, h: Hash) -> None:
    """Keep `h`, the hash of the upload's first `pos` bytes, for its next chunk."""
    with _lock:
        _running[upload] = (pos, h)
        _running.move_to_end(upload)
        while len(_running) > KEEP:
            _running.popitem(last=False)


def forget(upload: uuid.UUID) -> None:
    with _lock:
        _running.pop(upload, None)


def hash_file(h: Hash, fd: int, offset: int, length: int) -> None:
    """Feed `h` the `length` bytes of `fd` from `offset` (fresh in the page cache where they were
    just written)."""
    end = offset + length
    while offset < end:
        block = os.pread(fd, min(READ, end - offset), offset)
        if not block:
            raise OSError(f"the upload's data ends at {offset}, not {end}")
        h.update(block)
        offset += len(block)


class Follower:
    """Hashes the bytes the server splices into an upload's part file in a thread of its own,
    a little behind the splice, instead of in the splice's thread between its pieces: there the
    socket sat unread while each piece was read back and hashed (about half the time a chunk
    took), and the client's sendfile waited on it. `landed(n)` (the splice's thread) says `n`
    more bytes are in the file; `close()` waits until every byte landed is hashed. The follower
    stays at most `lag` bytes behind (the splice waits for it there), so what it reads back is
    still in the page cache. An error reading the file comes out of the next `landed` or of
    `close`."""

    def __init__(self, h: Hash, fd: int, offset: int, lag: int = LAG) -> None:
        self.h, self.fd, self.lag = h, fd, lag
        self._landed = self._hashed = offset
        self._closing = False
        self._error: BaseException | None = None
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="upload-digest", daemon=True)
        self._thread.start()

    def landed(self, n: int) -> None:
        with self._cv:
            self._raise()
            self._landed += n
            self._cv.notify_all()
            while self._landed - self._hashed > self.lag and self._error is None:
                self._cv.wait()
            self._raise()

    def close(self) -> None:
        """Wait for the hash to cover every byte landed (raising what stopped it, if anything)."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join()
        with self._cv:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._hashed == self._landed and not self._closing:
                    self._cv.wait()
                if self._hashed == self._landed or self._error is not None:
                    return
                start, n = self._hashed, min(READ, self._landed - self._hashed)
            try:
                hash_file(self.h, self.fd, start, n)
            except BaseException as e:  # noqa: BLE001 - handed to the splice's thread
                with self._cv:
                    self._error = e
                    self._cv.notify_all()
                return
            with self._cv:
                self._hashed += n
                self._cv.notify_all()
