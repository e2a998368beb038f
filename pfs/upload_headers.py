"""The headers and limits of the resumable upload protocol (pfs.uploads; the HTTP side is
pfs/api/upload_views.py), parsed into values or refused with a PathError (400)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

from .paths import PathError

# The largest file an upload may declare (1 PiB): far past any quota, and a size or offset the
# database, JavaScript clients and the OS all hold exactly.
MAX_FILE_SIZE = 1 << 50
# The whole file's digest, in hex: by algorithm, its form and the chunk header that brings it.
DIGEST_FORMS = {"sha256": re.compile(r"^[0-9a-f]{64}$"), "crc32c": re.compile(r"^[0-9a-f]{8}$")}
DIGEST_HEADERS = {"sha256": "Upload-Sha256", "crc32c": "Upload-Crc32c"}
CHECKSUM_ALGORITHMS = {"sha256": hashlib.sha256, "md5": hashlib.md5, "sha1": hashlib.sha1}


def parse_offset(header: str | None) -> int:
    """tus's `Upload-Offset: <bytes>`: where a chunk starts."""
    try:
        offset = int(header)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        offset = -1
    if not 0 <= offset <= MAX_FILE_SIZE:
        raise PathError(f"the Upload-Offset header must be a byte offset from 0 to {MAX_FILE_SIZE}")
    return offset


def parse_digest(sha256_h: str | None, crc32c_h: str | None) -> tuple[str, str] | None:
    """The whole file's digest a chunk brings, as (algorithm, lowercase hex): `Upload-Sha256: <64
    hex digits>` or `Upload-Crc32c: <8 hex digits>` (the CRC-32C as a big-endian number); None
    without either."""
    given = [(algo, value.strip().lower()) for algo, value in (("sha256", sha256_h), ("crc32c", crc32c_h))
             if value and value.strip()]
    if len(given) > 1:
        raise PathError("send Upload-Sha256 or Upload-Crc32c, not both")
    if not given:
        return None
    algo, value = given[0]
    if not DIGEST_FORMS[algo].match(value):
        digits = 64 if algo == "sha256" else 8
        raise PathError(f"{DIGEST_HEADERS[algo]} must be the whole file's {algo}: {digits} hexadecimal digits")
    return algo, value


def parse_checksum(header: str | None) -> tuple[str, bytes] | None:
    """tus's `Upload-Checksum: <algorithm> <base64 digest>` (sha256, sha1 or md5)."""
    if not header:
        return None
    try:
        algo, digest = header.strip().split(" ", 1)
        raw = base64.b64decode(digest.strip(), validate=True)
    except (ValueError, binascii.Error):
        raise PathError("Upload-Checksum must be '<algorithm> <base64 digest>'") from None
    if algo.lower() not in CHECKSUM_ALGORITHMS:
        raise PathError(f"unsupported checksum algorithm '{algo}': use sha256, sha1 or md5")
    return algo.lower(), raw
