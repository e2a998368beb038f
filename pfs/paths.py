"""Every PFS path a user gives is resolved and checked here, before any I/O.

Users see `/pfs/<datacenter>/home/<user>/...` (their own home, read-write) and
`/pfs/<datacenter>/public/...` (read-only for users; staff may write). On the server these map
to `<PFS_ROOT>/<datacenter>/home/<user>/...` and `<PFS_ROOT>/<datacenter>/public/...`.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.conf import settings

MAX_PATH_LENGTH = 4096
MAX_NAME_LENGTH = 255
# Hidden bookkeeping directory at the top of every home (resumable uploads, staged packages).
RESERVED_NAME = ".uploads"
# Bidirectional-text controls make a name display as something it is not.
_BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")
_SLASHES = ("/", "\\", "\u2215", "\u2044", "\u29f8", "\u29f9")


class PathError(Exception):
    """A path that is refused. `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


def check_name(name: str) -> str:
    """One path component: no separators, no `.`/`..`, no control characters."""
    if not name:
        raise PathError("empty path component")
    if name in (".", ".."):
        raise PathError(f"'{name}' is not allowed in a path")
    if "/" in name or "\\" in name:
        raise PathError(f"'{name}' must not contain a slash")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_LENGTH:
        raise PathError(f"name longer than {MAX_NAME_LENGTH} bytes")
    for ch in name:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise PathError("control characters are not allowed in a path")
        if ch in _BIDI:
            raise PathError("bidirectional text controls are not allowed in a path")
    if "\ufffd" in name:
        raise PathError("the path is not valid UTF-8 (or contains U+FFFD)")
    # Look-alikes (fullwidth dots and solidus, ...) that other systems may fold into real ones.
    folded = unicodedata.normalize("NFKC", name)
    if folded in (".", "..") or any(s in folded for s in _SLASHES):
        raise PathError(f"'{name}' looks like '{folded}', which is not allowed in a path")
    return name


@dataclass(frozen=True)
class PfsPath:
    datacenter: str
    area: str  # "home" or "public"
    owner: str | None  # the home's user; None for public
    parts: tuple[str, ...]  # components below the area root

    @property
    def root(self) -> Path:
        base = settings.PFS_ROOT / self.datacenter
        return base / "home" / self.owner if self.area == "home" else base / "public"

    @property
    def disk(self) -> Path:
        """The checked location on the server's disk (see `ensure_contained`)."""
        return self.root.joinpath(*self.parts)

    @property
    def virtual(self) -> str:
        head = f"/pfs/{self.datacenter}/home/{self.owner}" if self.area == "home" else f"/pfs/{self.datacenter}/public"
        return "/".join([head, *self.parts])

    @property
    def name(self) -> str:
        return self.parts[-1] if self.parts else (self.owner or "public")

    @property
    def parent(self) -> PfsPath:
        return PfsPath(self.datacenter, self.area, self.owner, self.parts[:-1])

    def child(self, *relative: str) -> PfsPath:
        """A path below this one; `relative` may hold `a/b/c` strings, each part checked."""
        parts = list(self.parts)
        for rel in relative:
            for part in str(rel).split("/"):
                if part in ("", "."):
                    continue
                parts.append(check_name(part))
        return PfsPath(self.datacenter, self.area, self.owner, tuple(parts))

    def ensure_contained(self) -> Path:
        """Resolve symlinks and refuse a path that ends up outside its area root."""
        root = os.path.realpath(self.root)
        real = os.path.realpath(self.disk)
        if real != root and not real.startswith(root + os.sep):
            raise PathError(f"{self.virtual}: a symbolic link points outside your storage", 403)
        return Path(real)


def _check_datacenter(name: str) -> None:
    from accounts.models import Datacenter

    if not Datacenter.objects.filter(name=name).exists():
        raise PathError(f"no datacenter named '{name}'", 404)


def home(user, datacenter: str) -> PfsPath:
    check_name(user.get_username())
    return PfsPath(datacenter, "home", user.get_username(), ())


def resolve(user, path: str, *, write: bool = False) -> PfsPath:
    """Parse and check a user-supplied PFS path; raises PathError saying why it is refused."""
    if not isinstance(path, str) or not path:
        raise PathError("a path is required")
    if len(path) > MAX_PATH_LENGTH:
        raise PathError(f"path longer than {MAX_PATH_LENGTH} characters")
    if "\x00" in path:
        raise PathError("NUL bytes are not allowed in a path")
    pure = PurePosixPath(path)
    if not pure.is_absolute():
        raise PathError("path must start with /pfs/<datacenter>/home/<user>/ or /pfs/<datacenter>/public/")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for p in parts:
        check_name(p)
    if len(parts) < 3 or parts[0] != "pfs" or parts[2] not in ("home", "public"):
        raise PathError("path must start with /pfs/<datacenter>/home/<user>/ or /pfs/<datacenter>/public/")
    datacenter = parts[1]
    if parts[2] == "home":
        if len(parts) < 4:
            raise PathError("path must name a home: /pfs/<datacenter>/home/<user>/", 403)
        if parts[3] != user.get_username():
            raise PathError("you can only use your own home directory", 403)
        if len(parts) > 4 and parts[4] == RESERVED_NAME:
            raise PathError(f"'{RESERVED_NAME}' is reserved for unfinished uploads", 403)
        result = PfsPath(datacenter, "home", parts[3], tuple(parts[4:]))
    else:
        if write and not user.is_staff:
            raise PathError(f"/pfs/{datacenter}/public is read-only", 403)
        result = PfsPath(datacenter, "public", None, tuple(parts[3:]))
    _check_datacenter(datacenter)
    result.ensure_contained()
    return result
