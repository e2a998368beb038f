"""RecordIO files, as PaddlePaddle writes and reads them (standard library only; snappy is
compiled when `paddlectl[fast]` is installed, see snappy.py).

A file is a sequence of chunks. Each chunk is a 20-byte header of little-endian uint32s and
then the chunk's (optionally compressed) data: for every record its length (uint32 LE) and its
bytes. The header's checksum is the CRC-32 (IEEE) of the chunk data as stored.

- layout "go" (github.com/PaddlePaddle/recordio, the `recordio` module of seed 004):
  magic 0x01020304, checksum, compressor, compressed size, number of records
- layout "fluid" (paddle.fluid.recordio, Paddle 1.x): magic, number of records, checksum,
  compressor, compressed size

Compressors: 0 none, 1 snappy (framing format), 2 gzip (go layout only). The reader detects
the layout of every chunk and checks its checksum; a damaged file raises CorruptRecordIO with
the file and byte offset, never returns garbage.

    w = recordio.writer("train-00000")      # or Writer(path, compressor=recordio.GZIP)
    w.write(pickle.dumps(sample)); w.close()
    r = recordio.reader("train-*")          # a glob: the files in sorted order
    while (data := r.read()) is not None: ...
"""

from __future__ import annotations

import contextlib
import glob as _glob
import gzip
import os
import secrets
import struct
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Literal, Union

from . import snappy

MAGIC = 0x01020304
HEADER = struct.Struct("<5I")
NO_COMPRESSION, SNAPPY, GZIP = 0, 1, 2
COMPRESSORS = {NO_COMPRESSION: "none", SNAPPY: "snappy", GZIP: "gzip"}
LAYOUTS = ("go", "fluid")
DEFAULT_MAX_CHUNK_SIZE = 32 * 1024 * 1024  # record bytes per chunk, before compression
MAX_STORED = 0xFFFFFFFF  # the header's sizes are uint32

PathOrFile = Union[str, "os.PathLike[str]", BinaryIO]


class RecordIOError(ValueError):
    pass


class CorruptRecordIO(RecordIOError):
    """A chunk failed its checks (magic number, checksum, sizes, decompression)."""

    def __init__(self, name: str, offset: int, reason: str):
        self.name, self.offset, self.reason = name, offset, reason
        super().__init__(f"{name}: corrupt RecordIO chunk at byte {offset}: {reason}")


@dataclass(frozen=True)
class ChunkHeader:
    checksum: int
    compressor: int
    compressed_size: int
    num_records: int
    layout: str

    def pack(self) -> bytes:
        if self.layout == "go":
            return HEADER.pack(MAGIC, self.checksum, self.compressor, self.compressed_size, self.num_records)
        return HEADER.pack(MAGIC, self.num_records, self.checksum, self.compressor, self.compressed_size)


def _compress(data: bytes, compressor: int) -> bytes:
    if compressor == NO_COMPRESSION:
        return data
    if compressor == SNAPPY:
        return snappy.compress(data)
    if compressor == GZIP:
        return gzip.compress(data, mtime=0)
    raise RecordIOError(f"unknown compressor {compressor}")


def _decompress(data: memoryview, compressor: int) -> bytes:
    if compressor == NO_COMPRESSION:
        return data.tobytes()
    if compressor == SNAPPY:
        return snappy.decompress(data)
    return gzip.decompress(data)


def _open(target: PathOrFile, mode: Literal["rb"]) -> tuple[BinaryIO, str, bool]:
    if hasattr(target, "read") or hasattr(target, "write"):
        return target, getattr(target, "name", "<stream>"), False  # type: ignore[return-value]  # a file, by hasattr
    path = os.fspath(target)
    return open(path, mode), path, True


def _discard(f: BinaryIO, path: str) -> None:
    f.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class Writer:
    """Writes records into chunks of about `max_chunk_size` bytes (before compression).

    As in Go's writer, a record that does not fit in the current chunk closes it, and a record
    bigger than `max_chunk_size` gets a chunk of its own: any record up to the format's 32-bit
    sizes goes in. A path is written as a hidden temporary file beside it and renamed into
    place by close(), so a failed or abandoned writer leaves no partial file behind."""

    def __init__(self, target: PathOrFile, max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE,
                 compressor: int = SNAPPY, layout: str = "go"):
        if compressor not in COMPRESSORS:
            raise RecordIOError(f"unknown compressor {compressor}; use NO_COMPRESSION, SNAPPY or GZIP")
        if layout not in LAYOUTS:
            raise RecordIOError(f"layout must be one of {LAYOUTS}")
        if layout == "fluid" and compressor == GZIP:
            raise RecordIOError("Paddle's fluid RecordIO has no gzip: use SNAPPY or NO_COMPRESSION")
        if max_chunk_size <= 0:
            raise RecordIOError("max_chunk_size must be positive")
        self.max_chunk_size, self.compressor, self.layout = max_chunk_size, compressor, layout
        self._records: list[bytes] = []
        self._bytes = 0  # the pending records' bytes (what Go's writer compares with the chunk size)
        self._stored = 0  # and with their 4-byte lengths, as stored
        self.closed = False
        self.count = 0
        self._temp: str | None = None
        self._file: BinaryIO
        if hasattr(target, "write"):
            self._file, self.name = target, getattr(target, "name", "<stream>")  # type: ignore[assignment]  # as in _open
            return
        self.name = os.fspath(target)
        directory, base = os.path.split(self.name)
        self._temp = os.path.join(directory, f".{base}.{secrets.token_hex(4)}.tmp")
        # O_EXCL: never through a planted file or link; 0o666 so the umask decides, as for open().
        fd = os.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        self._file = os.fdopen(fd, "wb")
        # An abandoned writer (an exception, a forgotten close) removes its file when collected.
        self._cleanup = weakref.finalize(self, _discard, self._file, self._temp)

    def write(self, record: bytes | bytearray | memoryview) -> int:
        if self.closed:
            raise RecordIOError("cannot write: the writer is closed")
        if not isinstance(record, (bytes, bytearray, memoryview)):
            raise TypeError(f"a record must be bytes, got {type(record).__name__} (pickle.dumps it first)")
        record = bytes(record)
        stored = 4 + len(record)
        if stored > MAX_STORED:
            raise RecordIOError(f"a record of {len(record)} bytes is over RecordIO's limit of "
                                f"{MAX_STORED - 4} (sizes are 32-bit)")
        if self._records and (self._bytes + len(record) > self.max_chunk_size
                              or self._stored + stored > MAX_STORED):
            self.flush()
        self._records.append(record)
        self._bytes += len(record)
        self._stored += stored
        self.count += 1
        return len(record)

    def flush(self) -> None:
        """Write the pending records as one chunk."""
        if not self._records:
            return
        parts: list[bytes] = []
        for r in self._records:
            parts += (struct.pack("<I", len(r)), r)
        data = _compress(b"".join(parts), self.compressor)
        if len(data) > MAX_STORED:
            raise RecordIOError(f"a chunk of {len(data)} bytes once compressed is over RecordIO's limit of "
                                f"{MAX_STORED}: write smaller records or compress less")
        header = ChunkHeader(zlib.crc32(data) & 0xFFFFFFFF, self.compressor, len(data), len(self._records),
                             self.layout)
        self._file.write(header.pack())
        self._file.write(data)
        self._records, self._bytes, self._stored = [], 0, 0

    def close(self) -> None:
        """Write what is pending and put the file in place (a path) or flush it (a stream)."""
        if self.closed:
            return
        self.closed = True
        if self._temp is None:
            self.flush()
            self._file.flush()
            return
        try:
            self.flush()
            self._file.close()
            os.replace(self._temp, self.name)
        except BaseException:
            self._cleanup()
            raise
        self._cleanup.detach()

    def abort(self) -> None:
        """Stop without writing: a path is left as it was before the writer started."""
        self.closed = True
        self._records, self._bytes, self._stored = [], 0, 0
        if self._temp is not None:
            self._cleanup()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _plausible(fields: tuple[int, int, int, int], remaining: int) -> bool:
    _, compressor, size, _ = fields
    return compressor in COMPRESSORS and size <= remaining


def read_chunk(f: BinaryIO, name: str = "<stream>", layout: str | None = None,
               remaining: int | None = None) -> tuple[ChunkHeader, list[bytes]] | None:
    """Read the chunk at the file's position: (header, records), or None at the end."""
    offset = f.tell()
    head = f.read(HEADER.size)
    if not head:
        return None
    if len(head) < HEADER.size:
        raise CorruptRecordIO(name, offset, f"truncated header ({len(head)} of {HEADER.size} bytes)")
    magic, a, b, c, d = HEADER.unpack(head)
    if magic != MAGIC:
        raise CorruptRecordIO(name, offset, f"bad magic number {magic:#010x} (not a RecordIO file?)")
    if remaining is None:
        here = f.tell()
        remaining = f.seek(0, os.SEEK_END) - here
        f.seek(here)
    else:
        remaining -= HEADER.size
    candidates = {"go": (a, b, c, d), "fluid": (b, c, d, a)}  # (checksum, compressor, size, records)
    order = [layout] if layout else [n for n in LAYOUTS if _plausible(candidates[n], remaining)]
    if not order:
        raise CorruptRecordIO(name, offset, "the header's compressor or size makes no sense")
    sizes = {candidates[n][2] for n in order}
    data = memoryview(f.read(max(sizes)))
    chosen = _checked_layout(candidates, order, data, name, offset)
    checksum, compressor, size, count = candidates[chosen]
    f.seek(offset + HEADER.size + size)
    if compressor == GZIP and chosen == "fluid":
        raise CorruptRecordIO(name, offset, "gzip compression in a fluid-layout chunk")
    try:
        raw = _decompress(data[:size], compressor)
    except (snappy.SnappyError, OSError, EOFError, zlib.error) as e:
        raise CorruptRecordIO(name, offset, f"cannot decompress ({COMPRESSORS[compressor]}): {e}") from None
    return ChunkHeader(checksum, compressor, size, count, chosen), _records(raw, count, name, offset)


def _checked_layout(candidates: dict[str, tuple[int, int, int, int]], order: list[str], data: memoryview,
                    name: str, offset: int) -> str:
    """The first layout in `order` whose checksum matches the chunk's `data`."""
    for n in order:
        checksum, _, size, _ = candidates[n]
        if len(data) >= size and zlib.crc32(data[:size]) & 0xFFFFFFFF == checksum:
            return n
    size = candidates[order[0]][2]
    if len(data) < size:
        raise CorruptRecordIO(name, offset, f"truncated chunk ({len(data)} of {size} data bytes)")
    raise CorruptRecordIO(name, offset, "checksum mismatch")


def _records(raw: bytes, count: int, name: str, offset: int) -> list[bytes]:
    """The `count` length-prefixed records of a chunk's decompressed data, all of it."""
    records: list[bytes] = []
    pos = 0
    for i in range(count):
        if pos + 4 > len(raw):
            raise CorruptRecordIO(name, offset, f"record {i} of {count} is missing")
        (length,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if pos + length > len(raw):
            raise CorruptRecordIO(name, offset, f"record {i} claims {length} bytes past the chunk's end")
        records.append(raw[pos:pos + length])
        pos += length
    if pos != len(raw):
        raise CorruptRecordIO(name, offset, f"{len(raw) - pos} stray bytes after {count} records")
    return records


class Scanner:
    """Reads the records of one file in order (optionally only records [start, start+length))."""

    def __init__(self, target: PathOrFile, start: int = 0, length: int = -1):
        self._file, self.name, self._owned = _open(target, "rb")
        self._start = max(0, start)
        self._end = None if length < 0 else self._start + length
        self._chunk: list[bytes] = []
        self._i = 0  # next record within the chunk
        self._next = 0  # index in the file of the record read() returns next
        self._layout: str | None = None

    def _load(self) -> bool:
        while True:
            chunk = read_chunk(self._file, self.name, self._layout)
            if chunk is None:
                return False
            header, records = chunk
            self._layout = header.layout
            if self._next + len(records) <= self._start:
                self._next += len(records)  # wholly before the range
                continue
            self._chunk = records
            self._i = max(0, self._start - self._next)
            self._next += self._i
            return True

    def read(self) -> bytes | None:
        """The next record, or None at the end (b"" is a valid, empty record)."""
        if self._end is not None and self._next >= self._end:
            return None
        if self._i >= len(self._chunk) and not self._load():
            return None
        record = self._chunk[self._i]
        self._i += 1
        self._next += 1
        return record

    def __iter__(self) -> Iterator[bytes]:
        while (record := self.read()) is not None:
            yield record

    def close(self) -> None:
        if self._owned:
            self._file.close()

    def __enter__(self) -> Scanner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reader:
    """Reads every record of every file matching a glob (or a list of paths), sorted by name."""

    def __init__(self, paths: str | os.PathLike[str] | list[str]):
        if isinstance(paths, (str, os.PathLike)):
            pattern = os.fspath(paths)
            self.paths = sorted(_glob.glob(pattern)) if _glob.has_magic(pattern) else [pattern]
        else:
            self.paths = list(paths)
        self._next = 0
        self._scanner: Scanner | None = None

    def read(self) -> bytes | None:
        while True:
            if self._scanner is None:
                if self._next >= len(self.paths):
                    return None
                self._scanner = Scanner(self.paths[self._next])
                self._next += 1
            record = self._scanner.read()
            if record is not None:
                return record
            self._scanner.close()
            self._scanner = None

    def __iter__(self) -> Iterator[bytes]:
        while (record := self.read()) is not None:
            yield record

    def close(self) -> None:
        if self._scanner is not None:
            self._scanner.close()
            self._scanner = None
        self._next = len(self.paths)

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Index:
    """Where the chunks of a file are, without decompressing them (like Go's LoadIndex)."""

    chunk_offsets: list[int]
    chunk_records: list[int]

    @property
    def num_records(self) -> int:
        return sum(self.chunk_records)

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_offsets)


def load_index(target: PathOrFile) -> Index:
    f, name, owned = _open(target, "rb")
    try:
        offsets: list[int] = []
        counts: list[int] = []
        while True:
            offset = f.tell()
            chunk = read_chunk(f, name)
            if chunk is None:
                return Index(offsets, counts)
            offsets.append(offset)
            counts.append(chunk[0].num_records)
    finally:
        if owned:
            f.close()


def writer(path: PathOrFile, max_chunk_size: int = DEFAULT_MAX_CHUNK_SIZE, compressor: int = SNAPPY,
           layout: str = "go") -> Writer:
    """`recordio.writer(path)` as in PaddlePaddle's Python binding."""
    return Writer(path, max_chunk_size, compressor, layout)


def reader(paths: str | os.PathLike[str] | list[str]) -> Reader:
    """`recordio.reader(glob)` as in PaddlePaddle's Python binding: read() returns None at the end."""
    return Reader(paths)
