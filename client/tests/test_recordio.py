"""RecordIO: round trips in both header layouts and every compressor, multi-file reads, range
scans, and corruption that must raise instead of returning garbage."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import zlib

import pytest

from paddlectl import recordio, snappy
from paddlectl.recordio import GZIP, NO_COMPRESSION, SNAPPY, CorruptRecordIO

RECORDS = [pickle.dumps({"i": i, "x": [i * 0.5] * (i % 7)}) for i in range(300)] + [b"", b"\x00" * 1000]


@pytest.mark.parametrize("layout, compressor", [("go", NO_COMPRESSION), ("go", SNAPPY), ("go", GZIP),
                                                ("fluid", NO_COMPRESSION), ("fluid", SNAPPY)])
def test_round_trip_in_every_layout_and_compressor(tmp_path, layout, compressor):
    path = tmp_path / "data.recordio"
    with recordio.Writer(path, max_chunk_size=4096, compressor=compressor, layout=layout) as w:
        for r in RECORDS:
            w.write(r)
    index = recordio.load_index(path)
    assert index.num_records == len(RECORDS) and index.num_chunks > 3
    with recordio.Scanner(path) as s:
        assert list(s) == RECORDS
    with recordio.Scanner(path, start=100, length=50) as s:
        assert list(s) == RECORDS[100:150]


def test_the_go_layout_byte_for_byte():
    """github.com/PaddlePaddle/recordio: magic, checksum, compressor, compressed size, records;
    each record is a uint32 length and its bytes; the checksum is CRC-32 of the stored data."""
    buf = io.BytesIO()
    with recordio.Writer(buf, compressor=NO_COMPRESSION) as w:
        w.write(b"Hello")
        w.write(b"World!")
    body = struct.pack("<I", 5) + b"Hello" + struct.pack("<I", 6) + b"World!"
    assert buf.getvalue() == struct.pack("<5I", 0x01020304, zlib.crc32(body), 0, len(body), 2) + body


def test_the_fluid_layout_byte_for_byte():
    buf = io.BytesIO()
    with recordio.Writer(buf, compressor=NO_COMPRESSION, layout="fluid") as w:
        w.write(b"abc")
    body = struct.pack("<I", 3) + b"abc"
    assert buf.getvalue() == struct.pack("<5I", 0x01020304, 1, zlib.crc32(body), 0, len(body)) + body


def test_reads_chunks_written_by_other_implementations():
    """A Go-writer style gzip chunk and a snappy chunk made by an independent library."""
    raw = b"".join(struct.pack("<I", len(r)) + r for r in (b"one", b"two"))
    gz = gzip.compress(raw)
    data = struct.pack("<5I", 0x01020304, zlib.crc32(gz), GZIP, len(gz), 2) + gz
    cramjam = pytest.importorskip("cramjam")
    framed = bytes(cramjam.snappy.compress(raw))
    data += struct.pack("<5I", 0x01020304, zlib.crc32(framed), SNAPPY, len(framed), 2) + framed
    assert list(recordio.Scanner(io.BytesIO(data))) == [b"one", b"two", b"one", b"two"]


def test_our_snappy_is_readable_by_an_independent_library():
    cramjam = pytest.importorskip("cramjam")
    for data in (b"", b"a" * 100_000, os.urandom(70_000), b"".join(b"row %d\n" % i for i in range(20_000))):
        assert bytes(cramjam.snappy.decompress(snappy.compress(data))) == data
        assert snappy.decompress(bytes(cramjam.snappy.compress(data))) == data
        assert snappy.decompress_block(bytes(cramjam.snappy.compress_raw(data))) == data
        assert bytes(cramjam.snappy.decompress_raw(snappy.compress_block(data[:65536]))) == data[:65536]


def test_reader_over_a_glob_of_files_like_the_python_binding(tmp_path):
    for n, records in enumerate(([pickle.dumps("1"), b"2", b""], [b"3", b"4", b""])):
        w = recordio.writer(str(tmp_path / f"record_{n}"))
        for r in records:
            w.write(r)
        w.close()
    r = recordio.reader(str(tmp_path / "record_*"))
    assert pickle.loads(r.read()) == "1"
    assert [r.read() for _ in range(5)] == [b"2", b"", b"3", b"4", b""]
    assert r.read() is None and r.read() is None
    r.close()


def _file(tmp_path, compressor=SNAPPY):
    path = tmp_path / "c.recordio"
    with recordio.Writer(path, max_chunk_size=2048, compressor=compressor) as w:
        for r in RECORDS:
            w.write(r)
    return path


@pytest.mark.parametrize("compressor", [NO_COMPRESSION, SNAPPY, GZIP])
def test_a_flipped_byte_in_the_data_is_a_checksum_error(tmp_path, compressor):
    path = _file(tmp_path, compressor)
    index = recordio.load_index(path)
    raw = bytearray(path.read_bytes())
    at = index.chunk_offsets[2] + 20 + 10
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordIO, match=f"at byte {index.chunk_offsets[2]}: checksum mismatch"):
        list(recordio.Scanner(path))


def test_bad_magic_truncation_and_lies_are_errors(tmp_path):
    path = _file(tmp_path)
    good = path.read_bytes()
    cases = {
        b"XXXX" + good[4:]: "bad magic number",
        good[:-7]: "truncated chunk",
        good + b"\x04\x03\x02": "truncated header",
        good[:10]: "truncated header",
    }
    for data, message in cases.items():
        path.write_bytes(data)
        with pytest.raises(CorruptRecordIO, match=message):
            list(recordio.Scanner(path))
    # a header that claims more records than the data holds, with a valid checksum
    body = struct.pack("<I", 3) + b"abc"
    path.write_bytes(struct.pack("<5I", 0x01020304, zlib.crc32(body), 0, len(body), 2) + body)
    with pytest.raises(CorruptRecordIO, match="record 1 of 2 is missing"):
        list(recordio.Scanner(path))
    # a snappy chunk whose stored bytes are not snappy
    junk = b"not snappy at all"
    path.write_bytes(struct.pack("<5I", 0x01020304, zlib.crc32(junk), SNAPPY, len(junk), 1) + junk)
    with pytest.raises(CorruptRecordIO, match="cannot decompress"):
        list(recordio.Scanner(path))


def test_writer_rules(tmp_path):
    w = recordio.Writer(tmp_path / "w", max_chunk_size=100)
    with pytest.raises(TypeError, match="pickle.dumps"):
        w.write("text")  # type: ignore[arg-type]
    w.close()
    with pytest.raises(recordio.RecordIOError, match="closed"):
        w.write(b"x")
    with pytest.raises(recordio.RecordIOError, match="no gzip"):
        recordio.Writer(tmp_path / "f", compressor=GZIP, layout="fluid")
    assert recordio.load_index(tmp_path / "w").num_records == 0
    assert not list(tmp_path.glob(".w.*"))  # no temporary file left beside it
