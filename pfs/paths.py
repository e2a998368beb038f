"""Every PFS path a user gives is resolved and checked here, before any I/O.

Users see `/pfs/<datacenter>/home/<user>/...` (their own home, read-write; seed 004 spells it
`/pfs/<datacenter>/user/<user>/...`, which is read the same way) and
`/pfs/<datacenter>/public/...` (read-only for users; staff may write). On the server these map
to `<PFS_ROOT>/<datacenter>/home/<user>/...` and `<PFS_ROOT>/<datacenter>/public/...`; the
service's partial data to `<PFS_ROOT>/<datacenter>/.scratch/<user>` and
`<PFS_ROOT>/<datacenter>/.public/.uploads` (`scratch_parts`), which no job mounts.
"""

from __future__ import annotations

import ctypes
import errno
import os
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MAX_PATH_LENGTH = 4096
MAX_NAME_LENGTH = 255
# Below PFS_ROOT/<dc>: the service's scratch directories of homes (one per user) and of public.
# Dot-names, so no area (`home`, `public`) nor job snapshot (`.paddlecloud`) can be one of them.
HOME_SCRATCH = ".scratch"
PUBLIC_SCRATCH = (".public", ".uploads")
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
    area: str  # "home" or "public"; "scratch" for what the service stages for a home (storage.staging_dir)
    owner: str | None  # the home's user; None for public
    parts: tuple[str, ...]  # components below the area root

    @property
    def root(self) -> Path:
        base = settings.PFS_ROOT / self.datacenter
        if self.area == "home":
            assert self.owner is not None, "a home has an owner"
            return base / "home" / self.owner
        if self.area == "scratch":
            return base.joinpath(*scratch_parts(self))
        return base / "public"

    @property
    def disk(self) -> Path:
        """The checked location on the server's disk (see `ensure_contained`)."""
        return self.root.joinpath(*self.parts)

    @property
    def virtual(self) -> str:
        head = {"home": f"/pfs/{self.datacenter}/home/{self.owner}",
                "scratch": f"/pfs/{self.datacenter}/home/{self.owner}/(being uploaded)"}.get(
                    self.area, f"/pfs/{self.datacenter}/public")
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

    def open(self, flags: int, mode: int = 0o600) -> int:
        """Open this path race-free below its area root (see `open_beneath`)."""
        return open_beneath(self.root, self.parts, flags, mode, virtual=self.virtual)

    @contextmanager
    def parent_fd(self) -> Iterator[int]:
        """The directory holding this path, opened race-free below the area root. Changes made
        by name relative to it (`dir_fd=fd`, `self.name`) cannot be led outside by a directory
        on the way swapped for a link after the checks."""
        fd = open_beneath(self.root, self.parts[:-1], os.O_RDONLY | os.O_DIRECTORY, virtual=self.virtual)
        try:
            yield fd
        finally:
            os.close(fd)

    def ensure_contained(self) -> Path:
        """Resolve symlinks and refuse a path that ends up outside its area root."""
        try:
            root = os.path.realpath(self.root)
            real = os.path.realpath(self.disk)
        except OSError:  # a link on the way vanished between realpath's lstat and readlink
            raise PathError(f"{self.virtual} changed while it was being checked: try again", 409) from None
        if real != root and not real.startswith(root + os.sep):
            raise PathError(f"{self.virtual}: a symbolic link points outside your storage", 403)
        return Path(real)


# openat2(2): the same number on every Linux architecture; RESOLVE_BENEATH refuses any step
# (`..`, an absolute symlink, a symlink leading up and out) that would leave the directory.
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS, _RESOLVE_BENEATH = 0x02, 0x08
_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(dirfd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0,  # openat2 refuses a mode without O_CREAT
                   _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd: int = _libc.syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def _open_stepwise(dirfd: int, parts: tuple[str, ...], flags: int, mode: int, virtual: str) -> int:
    """Without openat2: one component at a time, following no symbolic link at all."""
    fd = os.dup(dirfd)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                if last:
                    return os.open(part, flags | os.O_NOFOLLOW, mode, dir_fd=fd)
                step = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(f"/proc/self/fd/{fd}/{part}"):
                    raise PathError(f"{virtual}: a symbolic link is in the way", 403) from None
                raise
            os.close(fd)
            fd = step
        raise AssertionError("not reached")
    finally:
        os.close(fd)


def open_beneath(root: Path, parts: tuple[str, ...], flags: int, mode: int = 0o600, *, virtual: str = "") -> int:
    """Open `root/parts...` so that nothing on the way can lead outside `root`, not even a
    directory swapped for a symbolic link after the path was checked (see `open_at`). Leaving
    `root` is a PathError (403); a missing file is FileNotFoundError as for os.open."""
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_at(dirfd, parts, flags, mode, virtual=virtual)
    finally:
        os.close(dirfd)


def open_at(dirfd: int, parts: tuple[str, ...], flags: int, mode: int = 0o600, *, virtual: str = "") -> int:
    """Open `parts...` below the open directory `dirfd`, never leaving it: the kernel resolves
    the path beneath it (openat2 RESOLVE_BENEATH), or, where it cannot, each component is
    opened without following links. Leaving is a PathError (403)."""
    if not parts:
        parts = (".",)
    flags |= os.O_CLOEXEC
    try:
        return _openat2(dirfd, "/".join(parts), flags, mode)
    except OSError as e:
        if e.errno == errno.EXDEV:
            raise PathError(f"{virtual or 'the path'}: a symbolic link on the way leads outside your storage "
                            "(links are followed only when relative and staying inside)", 403) from None
        if e.errno == errno.ENAMETOOLONG:  # longer than PATH_MAX, though it passed `_components`
            raise PathError(f"path too long: more than {MAX_PATH_LENGTH} bytes", 400) from None
        if e.errno != errno.ENOSYS:
            raise
    return _open_stepwise(dirfd, parts, flags, mode, virtual or "the path")


def scratch_parts(p: PfsPath) -> tuple[str, ...]:
    """Where, below PFS_ROOT/<dc>, the scratch directory of `p`'s home (or public) lies."""
    return (HOME_SCRATCH, p.owner) if p.owner is not None else PUBLIC_SCRATCH


def _check_datacenter(name: str) -> None:
    from accounts.models import Datacenter

    if not Datacenter.objects.filter(name=name).exists():
        raise PathError(f"no datacenter named '{name}'", 404)


def home(user: User, datacenter: str) -> PfsPath:
    check_name(user.get_username())
    return PfsPath(datacenter, "home", user.get_username(), ())


def resolve(user: User, path: str, *, write: bool = False) -> PfsPath:
    """Parse and check a user-supplied PFS path; raises PathError saying why it is refused."""
    parts = _components(path)
    datacenter = parts[1]
    if parts[2] == "home":
        if len(parts) < 4:
            raise PathError("path must name a home: /pfs/<datacenter>/home/<user>/", 403)
        if parts[3] != user.get_username():
            raise PathError("you can only use your own home directory", 403)
        result = PfsPath(datacenter, "home", parts[3], tuple(parts[4:]))
    else:
        if write and not user.is_staff:
            raise PathError(f"/pfs/{datacenter}/public is read-only", 403)
        result = PfsPath(datacenter, "public", None, tuple(parts[3:]))
    _check_datacenter(datacenter)
    result.ensure_contained()
    return result


def _components(path: str) -> list[str]:
    """The checked components of an absolute /pfs/<datacenter>/{home,public}/... path (a home
    spelt `user` as seed 004 does reads as `home`)."""
    if not isinstance(path, str) or not path:
        raise PathError("a path is required")
    # Bytes, as the kernel's PATH_MAX counts: 4096 CJK characters are some 12,000 bytes.
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_LENGTH:
        raise PathError(f"path longer than {MAX_PATH_LENGTH} bytes")
    if "\x00" in path:
        raise PathError("NUL bytes are not allowed in a path")
    pure = PurePosixPath(path)
    if not pure.is_absolute():
        raise PathError("path must start with /pfs/<datacenter>/home/<user>/ or /pfs/<datacenter>/public/")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for p in parts:
        check_name(p)
    if len(parts) >= 3 and parts[2] == "user":  # seed 004's spelling of a home
        parts[2] = "home"
    if len(parts) < 3 or parts[0] != "pfs" or parts[2] not in ("home", "public"):
        raise PathError("path must start with /pfs/<datacenter>/home/<user>/ or /pfs/<datacenter>/public/")
    return parts


def nearest_dir(p: PfsPath) -> int:
    """An O_PATH descriptor of `p`, or of its nearest existing ancestor, opened race-free below
    its area root: where `make_dirs(p)` would create the rest."""
    parts = p.parts
    while True:
        try:
            return open_beneath(p.root, parts, os.O_PATH | os.O_DIRECTORY, virtual=p.virtual)
        except (FileNotFoundError, NotADirectoryError):
            if not parts:
                raise
            parts = parts[:-1]


def lies_inside(fd: int, top: os.stat_result, root: Path) -> bool:
    """Whether the open directory `fd` is the directory `top` or lies below it. Goes up by `..`
    from the descriptor (a directory's one real parent, whatever links led to it), up to `root`
    or the filesystem's root."""
    stop = os.stat(root)
    cur = os.dup(fd)
    try:
        while True:
            st = os.fstat(cur)
            if os.path.samestat(st, top):
                return True
            if os.path.samestat(st, stop):
                return False
            up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=cur)
            os.close(cur)
            cur = up
            if os.path.samestat(os.fstat(cur), st):  # `/`: its own parent
                return False
    finally:
        os.close(cur)
