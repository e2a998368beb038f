"""Snappy: the raw block format and the framing (stream) format.

RecordIO's "snappy" compressor is the snappy *framing* format (what Go's `snappy.NewWriter`
and C++ snappystream write): a stream identifier chunk, then chunks of type 0x00 (compressed
block) or 0x01 (uncompressed), each carrying a masked CRC-32C of its uncompressed data.
Specifications: github.com/google/snappy format_description.txt and framing_format.txt.

The framing is ours; the block codec and CRC-32C come from compiled libraries when they are
importable (`pip install paddlectl[fast]`: cramjam and google-crc32c), else from the pure-Python
code below, which needs nothing but is tens of times slower (bench/recordio.py prints both).
`backend` is the one in use.
"""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass
from typing import Callable

STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
MAX_BLOCK = 65536  # uncompressed bytes per framed chunk


class SnappyError(ValueError):
    pass


# --- CRC-32C (Castagnoli), by folding with Python's big integers -----------------------------
# CRC-32C is the remainder of dividing the message, as a polynomial over GF(2), by POLY (with
# the bits of each byte taken lowest first, the register preset to ones and the result
# complemented). Byte-at-a-time tables cost a few Python operations per byte; here the whole
# block becomes one integer, and the remainder is found by folding its top half onto its lower
# half (top * x^k = top * (x^k mod POLY), a carry-less product done as ~16 shifts and XORs of
# big integers, in C) until 128 bits are left: a few hundred Python operations per block
# instead of a few per byte.
POLY = 0x11EDC6F41
_REVERSED = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))  # each byte's bits reversed


def _times(a: int, b: int) -> int:
    """a * b mod POLY, both of degree < 32."""
    out = 0
    while b:
        if b & 1:
            out ^= a
        b >>= 1
        a <<= 1
        if a >> 32:
            a ^= POLY
    return out


@functools.lru_cache(maxsize=256)
def _shifts(k: int) -> tuple[int, ...]:
    """The powers of x whose sum is x^k mod POLY (the bits set in it)."""
    power, base, n = 1, 2, k
    while n:
        if n & 1:
            power = _times(power, base)
        base = _times(base, base)
        n >>= 1
    return tuple(j for j in range(32) if power >> j & 1)


def _remainder(a: int, bits: int) -> int:
    """a mod POLY, where a has at most `bits` bits."""
    while bits > 128:
        k = bits // 2
        top, a = a >> k, a & ((1 << k) - 1)
        for j in _shifts(k):
            a ^= top << j
        bits = max(k, bits - k + 32)
    for i in range(bits - 1, 31, -1):
        if a >> i & 1:
            a ^= POLY << (i - 32)
    return a


def _reflect32(v: int) -> int:
    return int(f"{v:032b}"[::-1], 2)


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C of `data`, continuing from `crc` (the CRC of what came before)."""
    n = len(data) * 8
    message = int.from_bytes(bytes(data).translate(_REVERSED), "big")
    preset = _reflect32(crc ^ 0xFFFFFFFF)
    return _reflect32(_remainder((message << 32) ^ (preset << n), n + 32)) ^ 0xFFFFFFFF


# --- raw block format --------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _literal(out: bytearray, data: bytes | memoryview) -> None:
    n = len(data) - 1
    if n < 60:
        out.append(n << 2)
    elif n < 1 << 8:
        out += bytes((60 << 2, n))
    elif n < 1 << 16:
        out.append(61 << 2)
        out += n.to_bytes(2, "little")
    elif n < 1 << 24:
        out.append(62 << 2)
        out += n.to_bytes(3, "little")
    else:
        out.append(63 << 2)
        out += n.to_bytes(4, "little")
    out += data


def _copy(out: bytearray, offset: int, length: int) -> None:
    """Emit copy ops for a match; every piece stays >= 4 bytes (as the reference encoder)."""
    while length >= 68:
        out.append(2 | (63 << 2))
        out += offset.to_bytes(2, "little")
        length -= 64
    if length > 64:
        out.append(2 | (59 << 2))
        out += offset.to_bytes(2, "little")
        length -= 60
    if length >= 12 or offset >= 2048:
        out.append(2 | ((length - 1) << 2))
        out += offset.to_bytes(2, "little")
    else:
        out.append(1 | ((length - 4) << 2) | ((offset >> 8) << 5))
        out.append(offset & 0xFF)


def compress_block(data: bytes) -> bytes:
    """Greedy LZ77 over 4-byte matches, within one block (<= 64 KiB, so 2-byte offsets)."""
    if len(data) > MAX_BLOCK:
        raise ValueError("compress_block takes at most 64 KiB; use compress() for more")
    out = bytearray(_varint(len(data)))
    view = memoryview(data)
    table: dict[bytes, int] = {}
    n = len(data)
    i = lit = 0
    misses = 32  # as the reference encoder: step further the longer no match is found
    while i + 4 <= n:
        key = data[i:i + 4]
        cand = table.get(key)
        table[key] = i
        if cand is None:
            i += misses >> 5
            misses += 1
            continue
        misses = 32
        length = 4
        while i + length + 16 <= n and data[cand + length:cand + length + 16] == data[i + length:i + length + 16]:
            length += 16
        while i + length < n and data[cand + length] == data[i + length]:
            length += 1
        if lit < i:
            _literal(out, view[lit:i])
        _copy(out, i - cand, length)
        i += length
        lit = i
    if lit < n:
        _literal(out, view[lit:])
    return bytes(out)


def _block_size(data: bytes) -> tuple[int, int]:
    """A block's uncompressed size (its varint preamble) and where its elements start."""
    size = shift = pos = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise SnappyError("bad snappy block: truncated length")
        b = data[pos]
        pos += 1
        size |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return size, pos


def decompress_block(data: bytes) -> bytes:
    view = memoryview(data)
    size, pos = _block_size(data)
    out = bytearray()
    end = len(data)
    try:
        while pos < end:
            tag = data[pos]
            kind = tag & 3
            if kind == 0:
                n = tag >> 2
                pos += 1
                if n >= 60:
                    width = n - 59
                    n = int.from_bytes(data[pos:pos + width], "little")
                    pos += width
                n += 1
                if pos + n > end:
                    raise SnappyError("bad snappy block: literal runs past the end")
                out += view[pos:pos + n]
                pos += n
                continue
            if kind == 1:
                length = 4 + ((tag >> 2) & 7)
                offset = ((tag >> 5) << 8) | data[pos + 1]
                pos += 2
            elif kind == 2:
                length = 1 + (tag >> 2)
                offset = int.from_bytes(data[pos + 1:pos + 3], "little")
                pos += 3
            else:
                length = 1 + (tag >> 2)
                offset = int.from_bytes(data[pos + 1:pos + 5], "little")
                pos += 5
            if offset == 0 or offset > len(out) or pos > end:
                raise SnappyError("bad snappy block: copy from before the start")
            start = len(out) - offset
            if offset >= length:
                out += out[start:start + length]
            else:  # overlapping copy repeats the last `offset` bytes
                chunk = bytes(out[start:])
                out += (chunk * (length // offset + 1))[:length]
    except IndexError:
        raise SnappyError("bad snappy block: truncated") from None
    if len(out) != size:
        raise SnappyError(f"bad snappy block: {len(out)} bytes instead of {size}")
    return bytes(out)


# --- backends ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Backend:
    name: str
    compress_block: Callable[[bytes], bytes]
    decompress_block: Callable[[bytes], bytes]
    crc32c: Callable[[bytes], int]
    python_codec: bool = False  # the block codec is the pure-Python one above (compress spares it work)


PURE = Backend("python", compress_block, decompress_block, crc32c, python_codec=True)


def find_backend() -> Backend:
    """cramjam's block codec and google-crc32c's CRC where importable, else the pure-Python parts."""
    name, compress, decompress, crc = [], compress_block, decompress_block, crc32c
    try:
        import cramjam
    except ImportError:
        pass
    else:
        name.append("cramjam")

        def compress(data: bytes) -> bytes:
            return bytes(cramjam.snappy.compress_raw(data))

        def decompress(data: bytes) -> bytes:
            try:
                return bytes(cramjam.snappy.decompress_raw(data))
            except cramjam.DecompressionError as e:
                raise SnappyError(f"bad snappy block: {e}") from None
    try:
        import google_crc32c
    except ImportError:
        pass
    else:
        # Without its C extension google-crc32c is pure Python too, and slower than ours.
        if google_crc32c.implementation == "c":
            name.append("google-crc32c")
            crc = google_crc32c.value
    if not name:
        return PURE
    return Backend("+".join(name), compress, decompress, crc, python_codec=compress is compress_block)


backend = find_backend()


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _block_length(block: bytes | memoryview) -> int:
    """The uncompressed length a raw block declares (its leading varint)."""
    size = shift = 0
    for pos in range(min(len(block), 5)):
        b = block[pos]
        size |= (b & 0x7F) << shift
        if not b & 0x80:
            return size
        shift += 7
    raise SnappyError("bad snappy block: truncated length")


# --- framing format -------------------------------------------------------------------------
def _frame(kind: int, body: bytes) -> bytes:
    return bytes((kind,)) + len(body).to_bytes(3, "little") + body


def _incompressible(block: bytes) -> bool:
    """Whether deflate at its fastest (zlib, compiled, in every Python) saves under 1/8 of the
    block: snappy, which has no entropy coding, would save less, so the pure-Python compressor
    (tens of times slower than zlib) need not try. Random bytes, JPEGs, anything compressed
    already."""
    return len(zlib.compress(block, 1)) >= len(block) - len(block) // 8


def compress(data: bytes | memoryview, codec: Backend | None = None) -> bytes:
    """The framing format, one chunk per 64 KiB; stored uncompressed when that is smaller (the
    pure-Python compressor skips what deflate cannot shrink either)."""
    codec = codec or backend
    view = memoryview(data)
    parts = [STREAM_IDENTIFIER]
    for start in range(0, len(view), MAX_BLOCK):
        block = bytes(view[start:start + MAX_BLOCK])
        crc = struct.pack("<I", masked(codec.crc32c(block)))
        packed = block if codec.python_codec and _incompressible(block) else codec.compress_block(block)
        if len(packed) < len(block) - len(block) // 8:
            parts.append(_frame(0x00, crc + packed))
        else:
            parts.append(_frame(0x01, crc + block))
    return b"".join(parts)


def decompress(data: bytes | memoryview, verify: bool = True, codec: Backend | None = None) -> bytes:
    codec = codec or backend
    view = memoryview(data)
    out = []
    pos, end = 0, len(view)
    seen_identifier = False
    while pos < end:
        if pos + 4 > end:
            raise SnappyError("bad snappy stream: truncated chunk header")
        kind = view[pos]
        length = int.from_bytes(view[pos + 1:pos + 4], "little")
        body = view[pos + 4:pos + 4 + length]
        if len(body) != length:
            raise SnappyError("bad snappy stream: truncated chunk")
        pos += 4 + length
        if kind == 0xFF:
            if body != STREAM_IDENTIFIER[4:]:
                raise SnappyError("bad snappy stream: wrong stream identifier")
            seen_identifier = True
            continue
        if not seen_identifier:
            raise SnappyError("bad snappy stream: no stream identifier")
        if kind in (0x00, 0x01):
            out.append(_data_chunk(kind, body, verify, codec))
        elif kind <= 0x7F:
            raise SnappyError(f"bad snappy stream: unknown chunk type {kind:#x}")
        # 0x80-0xfe: padding and skippable chunks
    return b"".join(out)


def _data_chunk(kind: int, body: memoryview, verify: bool, codec: Backend) -> bytes:
    """The data of a compressed (0x00) or uncompressed (0x01) chunk, its CRC checked if `verify`."""
    if len(body) < 4:
        raise SnappyError("bad snappy stream: chunk too short")
    if kind == 0x00:
        # The format caps a chunk at 64 KiB of data: a block claiming more is hostile.
        if _block_length(body[4:]) > MAX_BLOCK:
            raise SnappyError("bad snappy stream: a chunk decompresses to more than 64 KiB")
        block = codec.decompress_block(bytes(body[4:]))
    else:
        block = bytes(body[4:])
    if verify and struct.unpack("<I", body[:4])[0] != masked(codec.crc32c(block)):
        raise SnappyError("bad snappy stream: CRC-32C mismatch")
    return block
