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
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
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


def parse_sha256(header: str | None) -> str:
    """`Upload-Sha256: <hex>`: the whole file's sha256, on any chunk ("" without one)."""
    value = (header or "").strip().lower()
    if value and not _HEX64.match(value):
        raise PathError("Upload-Sha256 must be the whole file's sha256: 64 hexadecimal digits")
    return value


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
