"""What a resumable upload keeps beside its bytes: the file's digest (CRC-32C where google-crc32c
has its compiled code, else sha256), computed in a thread while the bytes go out (the server
hashes them as they arrive, and checks the two when the last byte is in), and a record of the
upload under ~/.paddle/uploads, so a later run of the same command finds it and sends only the
rest. The record holds the server's upload id and the file's size and modification time: a file
changed since (another size or time) starts a new upload, and one changed without either is
refused by the digest check at the end. Also the body of a chunk read from the file, for where
it goes through httpx rather than sendfile (wire.py).

CRC-32C rather than sha256: the check is against what a transfer may lose or garble, not against
an adversary (who could recompute any unkeyed digest on the way), as cloud object stores check
whole objects; it costs a tenth of sha256's CPU on each end (0.1 against 0.7 s per GiB here),
which was most of an upload's time beyond the copy itself (bench/transfer.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from . import config
from .errors import PaddlectlError

REPORT_INTERVAL = 0.1  # seconds between progress reports
Progress = Callable[[int, int], None]
READ = 4 << 20  # bytes hashed at a time (both hashes release the GIL for each)
BLOCK = 1 << 20  # bytes read from the file at a time while a chunk goes out through httpx


class Meter:
    """Sums bytes over many files for one progress callback, called at most every
    REPORT_INTERVAL seconds and at the end (a bar redraws ten times a second anyway; calling it
    for every 64 KiB network read costs throughput)."""

    def __init__(self, total: int, progress: Progress | None):
        self.total, self.done, self.progress = total, 0, progress
        self._next_report = 0.0
        self.report()

    def add(self, n: int) -> None:
        self.done += n
        if self.progress and (self.done >= self.total or time.monotonic() >= self._next_report):
            self.report()

    def report(self) -> None:
        if self.progress:
            self._next_report = time.monotonic() + REPORT_INTERVAL
            self.progress(self.done, self.total)


class FileSlice:
    """`length` bytes of the open file `f` from `offset`, read block by block as the request body
    goes out (counted in `sent` and on the meter); iterable again if the request is resent."""

    def __init__(self, f: BinaryIO, local: Path, offset: int, length: int, meter: Meter) -> None:
        self.f, self.local, self.offset, self.length, self.meter = f, local, offset, length, meter
        self.sent = 0

    def count(self, n: int) -> None:
        """`n` more bytes went out (sent by the kernel instead: wire.py)."""
        self.sent += n
        self.meter.add(n)

    def __iter__(self) -> Iterator[bytes]:
        self.f.seek(self.offset)
        left = self.length
        while left:
            block = self.f.read(min(BLOCK, left))
            if not block:
                raise PaddlectlError(f"{self.local} got shorter while it was being uploaded")
            left -= len(block)
            self.sent += len(block)
            self.meter.add(len(block))
            yield block


def preferred_algorithm() -> str:
    """The whole-file digest this client asks for: crc32c with google-crc32c's compiled code;
    sha256 without it (its pure-Python CRC is far slower than hashlib's sha256)."""
    try:
        import google_crc32c
    except ImportError:
        return "sha256"
    return "crc32c" if google_crc32c.implementation == "c" else "sha256"


class _Crc32c:
    """hashlib's interface to google-crc32c (hexdigest: the CRC as 8 hex digits, big-endian)."""

    def __init__(self) -> None:
        import google_crc32c

        self._extend, self._crc = google_crc32c.extend, 0

    def update(self, data: bytes) -> None:
        self._crc = int(self._extend(self._crc, data))

    def hexdigest(self) -> str:
        return f"{self._crc:08x}"


class Hasher:
    """The `algorithm` ("crc32c" or "sha256") digest of a file, computed in a thread started at
    once."""

    def __init__(self, path: Path, algorithm: str) -> None:
        self.path, self.algorithm = path, algorithm
        self._digest: str | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"paddlectl-{algorithm}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            h = _Crc32c() if self.algorithm == "crc32c" else hashlib.sha256()
            with open(self.path, "rb", buffering=0) as f:
                while not self._stop.is_set() and (block := f.read(READ)):
                    h.update(block)  # bytes: google-crc32c takes no memoryview
            if not self._stop.is_set():
                self._digest = h.hexdigest()
        except BaseException as e:  # noqa: BLE001 - handed to whoever asks for the result
            self._error = e
        finally:
            self._done.set()

    def ready(self) -> bool:
        return self._done.is_set()

    def result(self) -> str:
        """The hex digest, waiting for it if need be."""
        self._done.wait()
        if self._error is not None:
            raise PaddlectlError(f"cannot read {self.path}: {self._error}")
        if self._digest is None:
            raise PaddlectlError(f"hashing {self.path} was stopped")
        return self._digest

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Record:
    """Which upload of the server holds the start of `local` on its way to `remote`."""

    def __init__(self, endpoint: str, local: Path, remote: str) -> None:
        key = hashlib.sha256(f"{endpoint}\0{remote}\0{os.path.realpath(local)}".encode()).hexdigest()[:32]
        self.path = config.default_path().parent / "uploads" / f"{key}.json"

    @staticmethod
    def _stamp(st: os.stat_result) -> dict[str, int]:
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}

    def find(self, st: os.stat_result) -> tuple[str | None, bool]:
        """The upload id recorded, if any, and whether it was for the file as it is now (same
        size and time)."""
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None, False
        found = data.get("id")
        return (found, data.get("stamp") == self._stamp(st)) if isinstance(found, str) else (None, False)

    def save(self, upload_id: str, st: os.stat_result) -> None:
        with contextlib.suppress(OSError):  # without a record a later run starts over: no worse
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"id": upload_id, "stamp": self._stamp(st)}, f)
            os.replace(tmp, self.path)

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
