"""What users can do with their storage. The pages, /api/v2, the legacy /api/v1 adapter and the
job launcher all call these; every path goes through `pfs.paths.resolve` first, and every
change to a home adjusts its usage (pfs.usage). Errors are PathError(message, status).

Resumable uploads are in pfs.uploads, downloads and archives in pfs.transfer, share links in
pfs.shares, legacy chunk operations in pfs.chunks.
"""

from __future__ import annotations

import os
import stat as statmod
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import usage
from .paths import RESERVED_NAME, PathError, PfsPath, home, resolve
from .storage import CHUNK, copy_tree, locked, make_dirs, remove_at, save_stream, write_temp

__all__ = ["Entry", "PathError", "copy", "home_of", "listdir", "mkdir", "move", "remove", "stat", "write_file"]


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # the PFS path users see
    type: str  # "file", "dir" or "link"
    size: int
    mtime: datetime

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"


def _entry(p: PfsPath, st: os.stat_result) -> Entry:
    if statmod.S_ISDIR(st.st_mode):
        kind = "dir"
    elif statmod.S_ISLNK(st.st_mode):
        kind = "link"
    else:
        kind = "file"
    return Entry(p.name, p.virtual, kind, st.st_size if kind == "file" else 0,
                 datetime.fromtimestamp(st.st_mtime, tz=UTC))


def _lstat(p: PfsPath, parent_fd: int | None = None) -> os.stat_result:
    try:
        if parent_fd is not None:
            return os.stat(p.name, dir_fd=parent_fd, follow_symlinks=False)
        return os.lstat(p.disk)
    except (FileNotFoundError, NotADirectoryError):
        raise PathError(f"{p.virtual}: no such file or directory", 404) from None


def home_of(user, datacenter: str) -> PfsPath:
    """The user's home, created on first use."""
    h = home(user, datacenter)
    resolve(user, h.virtual)  # checks the datacenter exists
    h.disk.mkdir(parents=True, exist_ok=True)
    return h


def _resolve(user, path: str, *, write: bool = False) -> PfsPath:
    p = resolve(user, path, write=write)
    if p.area == "home" and not p.parts:
        p.disk.mkdir(parents=True, exist_ok=True)
    return p


def stat(user, path: str) -> Entry:
    p = _resolve(user, path)
    return _entry(p, _lstat(p))


def listdir(user, path: str) -> list[Entry]:
    """A directory's entries, directories first, then by name. A file lists as itself."""
    p = _resolve(user, path)
    st = _lstat(p)
    if not statmod.S_ISDIR(st.st_mode):
        return [_entry(p, st)]
    out = []
    with os.scandir(p.disk) as it:
        for e in it:
            if p.area == "home" and not p.parts and e.name == RESERVED_NAME:
                continue
            try:
                out.append(_entry(p.child(e.name), e.stat(follow_symlinks=False)))
            except (PathError, FileNotFoundError):
                continue  # names we would refuse (control characters...) or gone meanwhile
    out.sort(key=lambda e: (not e.is_dir, e.name))
    return out


def mkdir(user, path: str) -> Entry:
    """Create the directory and its parents (`mkdir -p`); fine if it already exists."""
    p = _resolve(user, path, write=True)
    make_dirs(p)
    return stat(user, p.virtual)


def _refuse_root(p: PfsPath, what: str) -> None:
    if not p.parts:
        raise PathError(f"{p.virtual} is the root of your storage: it cannot be {what}", 403)


def remove(user, path: str, *, recursive: bool = False) -> int:
    """Remove a file or link; a directory only with `recursive`. Returns the bytes freed."""
    p = _resolve(user, path, write=True)
    _refuse_root(p, "removed")
    p.parent.ensure_contained()
    with p.parent_fd() as fd:
        st = _lstat(p, fd)
        if statmod.S_ISDIR(st.st_mode):
            if not recursive:
                raise PathError(f"{p.virtual} is a directory: remove it with recursive=true", 409)
            freed = usage.tree_size(p.disk)
            # Rename out of the way first, so the path is gone at once even for a huge tree.
            trash = f".removing-{uuid.uuid4().hex}"  # not from the name: that may be 255 bytes already
            os.rename(p.name, trash, src_dir_fd=fd, dst_dir_fd=fd)
            remove_at(trash, fd)
        else:
            freed = st.st_size if statmod.S_ISREG(st.st_mode) else 0
            os.unlink(p.name, dir_fd=fd)
    usage.adjust(p, -freed)
    return freed


def _dest(user, src: PfsPath, dst: str, overwrite: bool) -> PfsPath:
    d = _resolve(user, dst, write=True)
    _refuse_root(d, "replaced")
    if d.disk.is_dir() and not d.disk.is_symlink():
        d = d.child(src.name)  # like mv/cp: into an existing directory
        d.ensure_contained()
    if src.disk == d.disk or str(d.disk).startswith(str(src.disk) + os.sep):
        raise PathError(f"cannot put {src.virtual} inside itself", 409)
    if os.path.lexists(d.disk):
        if not overwrite:
            raise PathError(f"{d.virtual} already exists (overwrite=true replaces it)", 409)
        if d.disk.is_dir() and not d.disk.is_symlink():
            raise PathError(f"{d.virtual} is an existing directory: remove it first", 409)
    make_dirs(d.parent)
    return d


def move(user, src: str, dst: str, *, overwrite: bool = False) -> Entry:
    """Rename or move within PFS (both ends writable by the user)."""
    s = _resolve(user, src, write=True)
    _refuse_root(s, "moved")
    _lstat(s)
    d = _dest(user, s, dst, overwrite)
    with locked(d):
        size = usage.tree_size(s.disk)
        replaced = usage.tree_size(d.disk) if os.path.lexists(d.disk) else 0
        same_home = (s.area, s.owner, s.datacenter) == (d.area, d.owner, d.datacenter)
        if not same_home:
            usage.check_room(d, size, replaced_bytes=replaced)
        d.parent.ensure_contained()
        with s.parent_fd() as src_dir, d.parent_fd() as dst_dir:
            os.replace(s.name, d.name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
        if same_home:
            usage.adjust(d, -replaced)
        else:
            usage.adjust(s, -size)
            usage.adjust(d, size - replaced)
    return stat(user, d.virtual)


def copy(user, src: str, dst: str, *, overwrite: bool = False) -> Entry:
    """Copy a file or a directory tree within PFS (links inside a tree are skipped)."""
    s = _resolve(user, src)
    _lstat(s)
    d = _dest(user, s, dst, overwrite)
    size = usage.tree_size(s.disk)
    replaced = usage.tree_size(d.disk) if os.path.lexists(d.disk) else 0
    usage.check_room(d, size, replaced_bytes=replaced)
    src_fd = s.open(os.O_RDONLY)
    try:
        if statmod.S_ISDIR(os.fstat(src_fd).st_mode):
            _copy_dir(src_fd, d)
        else:
            with os.fdopen(os.dup(src_fd), "rb", buffering=0) as f:
                save_stream(d, iter(lambda: f.read(CHUNK), b""))
    finally:
        os.close(src_fd)
    usage.adjust(d, size - replaced)
    return stat(user, d.virtual)


def _copy_dir(src_fd: int, d: PfsPath) -> None:
    """Copy the open directory into a hidden temporary one beside `d`, renamed onto `d` when whole."""
    tmp = f".copying-{uuid.uuid4().hex}"
    d.parent.ensure_contained()
    with d.parent_fd() as parent:
        os.mkdir(tmp, 0o755, dir_fd=parent)
        try:
            tmp_fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                copy_tree(src_fd, tmp_fd)
            finally:
                os.close(tmp_fd)
            os.rename(tmp, d.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            remove_at(tmp, parent)
            raise


def write_file(user, path: str, chunks: Iterable[bytes], *, length: int | None, overwrite: bool = True) -> Entry:
    """A one-shot upload: stream `chunks` to a temporary file and rename it onto `path`.
    With `length` known the quota is checked before writing; either way while writing."""
    p = _resolve(user, path, write=True)
    _refuse_root(p, "replaced")
    if p.disk.is_dir():
        raise PathError(f"{p.virtual} is a directory", 409)
    if not overwrite and os.path.lexists(p.disk):
        raise PathError(f"{p.virtual} already exists (overwrite=true replaces it)", 409)
    old = p.disk.stat().st_size if p.disk.is_file() else 0
    usage.check_room(p, length or 0, replaced_bytes=old)
    room = None
    if p.area == "home":
        u = usage.get_usage(user, p.datacenter)
        room = u.limit_bytes - u.used_bytes - u.reserved_bytes + old

    def limited():
        written = 0
        for chunk in chunks:
            written += len(chunk)
            if room is not None and written > room:
                usage.check_room(p, written, replaced_bytes=old)
            yield chunk
        if length is not None and written != length:
            raise PathError(f"expected {length} bytes, received {written}", 400)

    tmp, size = write_temp(p, limited())
    try:
        make_dirs(p.parent)
        put_in_place(p, tmp, size, overwrite=overwrite)
    finally:
        tmp.unlink(missing_ok=True)
    return stat(user, p.virtual)


def put_in_place(p: PfsPath, tmp: Path, size: int, *, overwrite: bool = True) -> None:
    """Atomically rename the finished temporary file onto `p` and account for it."""
    with locked(p), p.parent_fd() as fd:
        p.ensure_contained()  # re-check: a symlink could have been planted meanwhile
        try:
            st = os.stat(p.name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and statmod.S_ISDIR(st.st_mode):
            raise PathError(f"{p.virtual} is a directory", 409)
        if not overwrite and st is not None:
            raise PathError(f"{p.virtual} already exists (overwrite=true replaces it)", 409)
        old = st.st_size if st is not None and statmod.S_ISREG(st.st_mode) else 0
        os.replace(tmp, p.name, dst_dir_fd=fd)
        usage.adjust(p, size - old)
