"""RecordIO records of every size the format allows, interop with an independent snappy
(cramjam's framing codec), files that appear whole or not at all, and both snappy back ends:
the compiled one (cramjam + google-crc32c, `paddlectl[fast]`) and the pure-Python fallback."""

from __future__ import annotations

import dataclasses
import gc
import os
import struct
import sys
import zlib

import pytest

from paddlectl import recordio, snappy
from paddlectl.recordio import NO_COMPRESSION, SNAPPY

cramjam = pytest.importorskip("cramjam")

MiB = 1 << 20
BIG = 32 * MiB + 1  # over PaddlePaddle's default chunk size: Go's writer gives it a chunk of its own
SIZES = [0, 1, 65535, 65536, 65537, MiB - 1, MiB, MiB + 1, BIG]  # snappy blocks, our 1 MiB test chunks


@pytest.fixture(params=["compiled", "python"])
def codec(request, monkeypatch) -> snappy.Backend:
    """Runs the test once with each snappy back end in use."""
    if request.param == "python":
        monkeypatch.setattr(snappy, "backend", snappy.PURE)
    elif snappy.backend is snappy.PURE:
        pytest.skip("cramjam and google-crc32c are not installed (pip install paddlectl[fast])")
    return snappy.backend


@pytest.fixture
def folder(tmp_path):
    """An empty directory of its own (tmp_path also holds the tests' HOME)."""
    (tmp_path / "data").mkdir()
    return tmp_path / "data"


def _record(size: int) -> bytes:
    """Half incompressible, half repetitive: both kinds of snappy chunk."""
    half = size // 2
    return os.urandom(half) + b"recordio " * ((size - half) // 9) + b"!" * ((size - half) % 9)


def _read_independently(path) -> list[bytes]:
    """The Go layout parsed here, the snappy data decoded by cramjam alone."""
    data, records, pos = path.read_bytes(), [], 0
    while pos < len(data):
        magic, checksum, compressor, size, count = struct.unpack_from("<5I", data, pos)
        body = data[pos + 20:pos + 20 + size]
        assert magic == 0x01020304 and zlib.crc32(body) == checksum and compressor == SNAPPY
        raw, at = bytes(cramjam.snappy.decompress(body)), 0
        for _ in range(count):
            (length,) = struct.unpack_from("<I", raw, at)
            records.append(raw[at + 4:at + 4 + length])
            at += 4 + length
        assert at == len(raw)
        pos += 20 + size
    return records


def _write_independently(path, chunks: list[list[bytes]]) -> None:
    with open(path, "wb") as f:
        for chunk in chunks:
            framed = bytes(cramjam.snappy.compress(b"".join(struct.pack("<I", len(r)) + r for r in chunk)))
            f.write(struct.pack("<5I", 0x01020304, zlib.crc32(framed), SNAPPY, len(framed), len(chunk)) + framed)


def test_the_compiled_back_end_is_used_when_installed(codec):
    assert snappy.backend.name == ("python" if codec is snappy.PURE else "cramjam+google-crc32c")
    assert codec.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert snappy.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("size", SIZES)
def test_records_of_every_size_are_read_by_an_independent_snappy_and_back(tmp_path, codec, size):
    records = [_record(size), b"after"]
    ours = tmp_path / "ours.recordio"
    with recordio.Writer(ours, max_chunk_size=MiB) as w:
        for r in records:
            w.write(r)
    assert _read_independently(ours) == records
    assert list(recordio.Scanner(ours)) == records

    theirs = tmp_path / "theirs.recordio"
    _write_independently(theirs, [records[:1], records[1:]])
    assert list(recordio.Scanner(theirs)) == records


def test_a_record_over_the_default_chunk_size_gets_a_chunk_of_its_own(tmp_path):
    path = tmp_path / "big.recordio"
    big = _record(BIG)
    with recordio.Writer(path) as w:  # PaddlePaddle's default: 32 MiB chunks
        w.write(b"before")
        w.write(big)
        w.write(b"after")
    index = recordio.load_index(path)
    assert index.chunk_records == [1, 1, 1]
    assert list(recordio.Scanner(path)) == [b"before", big, b"after"]
    assert list(recordio.Scanner(path, start=1, length=1)) == [big]


def test_chunks_are_cut_where_gos_writer_cuts_them(tmp_path):
    """Go: a record that would take the chunk's record bytes over the maximum closes the chunk
    first; lengths are not counted; a record alone may exceed the maximum."""
    path = tmp_path / "cut.recordio"
    with recordio.Writer(path, max_chunk_size=10, compressor=NO_COMPRESSION) as w:
        for r in (b"a", b"x" * 25, b"y", b"z" * 9, b"", b"q"):
            w.write(r)
    assert recordio.load_index(path).chunk_records == [1, 1, 3, 1]


def test_a_writer_that_fails_leaves_no_file_and_keeps_the_old_one(folder):
    path = folder / "data.recordio"
    path.write_bytes(b"the previous version")
    with pytest.raises(RuntimeError), recordio.Writer(path) as w:
        w.write(b"half of the data")
        raise RuntimeError("the program failed half-way")
    assert path.read_bytes() == b"the previous version"
    assert sorted(p.name for p in folder.iterdir()) == ["data.recordio"]

    fresh = folder / "new.recordio"
    with pytest.raises(TypeError), recordio.Writer(fresh) as w:
        w.write("not bytes")  # type: ignore[arg-type]
    assert not fresh.exists()
    assert sorted(p.name for p in folder.iterdir()) == ["data.recordio"]


def test_an_abandoned_writer_removes_its_temporary_file(folder):
    w = recordio.Writer(folder / "never.recordio")
    w.write(b"x" * 1000)
    assert len(list(folder.iterdir())) == 1  # the hidden temporary file, not the target
    del w
    gc.collect()
    assert list(folder.iterdir()) == []


def test_a_close_that_cannot_put_the_file_in_place_removes_it(folder):
    target = folder / "taken"
    target.mkdir()
    w = recordio.Writer(target)
    w.write(b"data")
    with pytest.raises(OSError):
        w.close()
    assert w.closed
    assert [p.name for p in folder.iterdir()] == ["taken"] and not any(target.iterdir())


def test_the_file_appears_with_the_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        with recordio.Writer(tmp_path / "f.recordio") as w:
            w.write(b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f.recordio").stat().st_mode & 0o777 == 0o644


def test_a_snappy_chunk_claiming_more_than_64_kib_is_refused_before_decoding(codec):
    block = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00a"  # declares 1 GiB, holds one literal
    stream = snappy.STREAM_IDENTIFIER + bytes((0,)) + (4 + len(block)).to_bytes(3, "little") + b"\0" * 4 + block
    with pytest.raises(snappy.SnappyError, match="more than 64 KiB"):
        snappy.decompress(stream)


def test_damaged_snappy_blocks_are_errors_in_both_back_ends(codec):
    good = snappy.compress(b"hello hello hello hello hello hello " * 100)
    damaged = bytearray(good)
    damaged[len(good) // 2] ^= 0xFF
    with pytest.raises(snappy.SnappyError):
        snappy.decompress(bytes(damaged))
    assert snappy.decompress(good) == b"hello hello hello hello hello hello " * 100


def test_each_compiled_library_is_used_without_the_other(monkeypatch):
    data = b"".join(b"line %d of the data set\n" % i for i in range(10_000))
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # as if not installed: import fails
    only_cramjam = snappy.find_backend()
    assert only_cramjam.name == "cramjam" and only_cramjam.crc32c is snappy.crc32c
    assert bytes(cramjam.snappy.decompress(snappy.compress(data, only_cramjam))) == data
    monkeypatch.setitem(sys.modules, "cramjam", None)
    assert snappy.find_backend() is snappy.PURE
    monkeypatch.delitem(sys.modules, "google_crc32c")
    only_crc = snappy.find_backend()
    assert only_crc.name == "google-crc32c" and only_crc.compress_block is snappy.compress_block
    assert snappy.decompress(snappy.compress(data, only_crc), codec=snappy.PURE) == data


def test_the_pure_python_crc_32c_agrees_with_the_compiled_one_at_every_length():
    google_crc32c = pytest.importorskip("google_crc32c")
    for size in [*range(300), 65535, 65536, 65537, MiB + 3]:
        data = os.urandom(size)
        assert snappy.crc32c(data) == google_crc32c.value(data), size
    first, second = os.urandom(1000), os.urandom(4097)
    assert snappy.crc32c(second, snappy.crc32c(first)) == google_crc32c.value(first + second)


def test_the_pure_python_crc_32c_takes_no_python_step_per_byte():
    """The CRC of a block is folded with big-integer arithmetic: the lines of Python it runs do
    not grow with the block (a table costs one loop turn per 8 bytes: 8192 for 64 KiB). The
    first block of each size works out its powers of x once."""
    def lines_run(data: bytes) -> int:
        snappy.crc32c(data)
        count = 0

        def trace(frame, event, arg):
            nonlocal count
            if event == "line":
                count += 1
            return trace
        sys.settrace(trace)
        try:
            snappy.crc32c(data)
        finally:
            sys.settrace(None)
        return count
    small, large = lines_run(os.urandom(64)), lines_run(os.urandom(65536))
    assert large < 2000 and large < small * 10, (small, large)


def test_the_pure_python_writer_stores_what_deflate_cannot_shrink_without_trying(monkeypatch):
    """Random bytes (images, compressed data) go into the file as snappy's uncompressed chunks
    without the pure-Python compressor's pass over them; compressible blocks are compressed."""
    calls: list[int] = []

    def counted(block: bytes) -> bytes:
        calls.append(len(block))
        return snappy.compress_block(block)
    pure = dataclasses.replace(snappy.PURE, compress_block=counted)
    noise, words = os.urandom(200_000), b"recordio " * 20_000
    framed = snappy.compress(noise + words, pure)
    assert sum(calls) < len(words) + 65536  # the blocks of noise were not tried
    assert snappy.decompress(framed, codec=snappy.PURE) == noise + words
    assert len(framed) < len(noise) + len(words) // 4
