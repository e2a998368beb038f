"""What users can do with their storage. The pages, /api/v2, the legacy /api/v1 adapter and the
job launcher all call these; every path goes through `pfs.paths.resolve` first, and every
change to a home adjusts its usage (pfs.usage). Errors are PathError(message, status).

Resumable uploads are in pfs.uploads, downloads and archives in pfs.transfer, share links in
pfs.shares, legacy chunk operations in pfs.chunks.
"""

from __future__ import annotations

import errno
import os
import stat as statmod
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from . import usage
from .paths import PathError, PfsPath, home, lies_inside, nearest_dir, open_beneath, resolve
from .storage import (
    DIRECTORY,
    HARD_LINKED,
    copy_to_temp,
    copy_tree,
    discard_temp,
    locked,
    make_dirs,
    remove_at,
    scratch_fd,
    size_at,
    tree_size_fd,
    write_temp,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

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


def _missing(p: PfsPath) -> PathError:
    return PathError(f"{p.virtual}: no such file or directory", 404)


@contextmanager
def _parent(p: PfsPath) -> Iterator[int]:
    """`p.parent_fd()`, with a missing parent (or a file where a directory should be) a 404."""
    try:
        fd = open_beneath(p.root, p.parts[:-1], os.O_RDONLY | os.O_DIRECTORY, virtual=p.virtual)
    except (FileNotFoundError, NotADirectoryError):
        raise _missing(p) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _lstat_at(p: PfsPath, parent_fd: int) -> os.stat_result | None:
    """`p`'s own metadata (a link is not followed) by name in its parent; None when missing."""
    try:
        return os.stat(p.name, dir_fd=parent_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _lstat(p: PfsPath) -> os.stat_result:
    """`p`'s own metadata, looked up race-free below its area root; 404 when missing."""
    if not p.parts:
        fd = _open(p, DIRECTORY)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)
    with _parent(p) as fd:
        st = _lstat_at(p, fd)
    if st is None:
        raise _missing(p)
    return st


def _open(p: PfsPath, flags: int) -> int:
    """`p.open(flags)` with a missing path a 404 and a link at its end a 403."""
    try:
        return p.open(flags)
    except (FileNotFoundError, NotADirectoryError):
        raise _missing(p) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathError(f"{p.virtual}: a symbolic link is in the way", 403) from None
        raise


def home_of(user: User, datacenter: str) -> PfsPath:
    """The user's home, created on first use."""
    h = home(user, datacenter)
    resolve(user, h.virtual)  # checks the datacenter exists
    h.disk.mkdir(parents=True, exist_ok=True)
    return h


def _resolve(user: User, path: str, *, write: bool = False) -> PfsPath:
    p = resolve(user, path, write=write)
    if p.area == "home" and not p.parts:
        p.disk.mkdir(parents=True, exist_ok=True)
    return p


def stat(user: User, path: str) -> Entry:
    p = _resolve(user, path)
    return _entry(p, _lstat(p))


def listdir(user: User, path: str) -> list[Entry]:
    """A directory's entries, directories first, then by name. A file lists as itself. The
    directory is opened race-free and read by descriptor, so one a job swaps for a link
    meanwhile never lists what the link points at."""
    p = _resolve(user, path)
    fd = _open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not statmod.S_ISDIR(st.st_mode):
            return [_entry(p, st)]
        out: list[Entry] = []
        with os.scandir(fd) as it:
            for e in it:
                try:
                    out.append(_entry(p.child(e.name), e.stat(follow_symlinks=False)))
                except (PathError, FileNotFoundError):
                    continue  # names we would refuse (control characters...) or gone meanwhile
    finally:
        os.close(fd)
    out.sort(key=lambda e: (not e.is_dir, e.name))
    return out


def mkdir(user: User, path: str) -> Entry:
    """Create the directory and its parents (`mkdir -p`); fine if it already exists."""
    p = _resolve(user, path, write=True)
    make_dirs(p)
    return stat(user, p.virtual)


def _refuse_root(p: PfsPath, what: str) -> None:
    if not p.parts:
        raise PathError(f"{p.virtual} is the root of your storage: it cannot be {what}", 403)


def remove(user: User, path: str, *, recursive: bool = False) -> int:
    """Remove a file or link; a directory only with `recursive`. Returns the bytes freed (files
    with other hard links free nothing certain and are not counted)."""
    p = _resolve(user, path, write=True)
    _refuse_root(p, "removed")
    p.parent.ensure_contained()
    with _parent(p) as fd:
        st = _lstat_at(p, fd)
        if st is None:
            raise _missing(p)
        if statmod.S_ISDIR(st.st_mode):
            if not recursive:
                raise PathError(f"{p.virtual} is a directory: remove it with recursive=true", 409)
            # Rename out of the way first, so the path is gone at once even for a huge tree.
            trash = f".removing-{uuid.uuid4().hex}"  # not from the name: that may be 255 bytes already
            os.rename(p.name, trash, src_dir_fd=fd, dst_dir_fd=fd)
            freed = size_at(trash, fd, only_unlinked=True)
            remove_at(trash, fd)
        else:
            freed = counted_size(st)
            os.unlink(p.name, dir_fd=fd)
    usage.adjust(p, -freed)
    return freed


def _dest(user: User, src: PfsPath, src_st: os.stat_result, dst: str, overwrite: bool) -> PfsPath:
    """The checked destination for moving or copying `src`, whose metadata (as the operation
    sees it: a copy follows a link at its end, a move does not) is `src_st`."""
    d = _resolve(user, dst, write=True)
    _refuse_root(d, "replaced")
    if _kind(d) == "dir":
        d = d.child(src.name)  # like mv/cp: into an existing directory
        d.ensure_contained()
    inside = PathError(f"cannot put {src.virtual} inside itself", 409)
    if src.disk == d.disk or str(d.disk).startswith(str(src.disk) + os.sep):
        raise inside
    # The destination is opened following links that stay inside the home (`lnk -> a`, then
    # `a -> lnk/b`), so the names prove nothing: check the directories it really lies in.
    if statmod.S_ISDIR(src_st.st_mode):
        fd = nearest_dir(d.parent)
        try:
            if lies_inside(fd, src_st, d.root):
                raise inside
        finally:
            os.close(fd)
    kind = _kind(d)
    if kind is not None:
        if not overwrite:
            raise PathError(f"{d.virtual} already exists (overwrite=true replaces it)", 409)
        if kind == "dir":
            raise PathError(f"{d.virtual} is an existing directory: remove it first", 409)
    make_dirs(d.parent)
    return d


def lstat_or_none(p: PfsPath) -> os.stat_result | None:
    """`p`'s own metadata, looked up race-free below its area root; None when it (or its
    parent) is missing."""
    if not p.parts:
        return _lstat(p)
    try:
        with p.parent_fd() as fd:
            return _lstat_at(p, fd)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _kind(p: PfsPath) -> str | None:
    """"dir", "file" (anything else that is there, links included) or None when missing."""
    st = lstat_or_none(p)
    if st is None:
        return None
    return "dir" if statmod.S_ISDIR(st.st_mode) else "file"


def counted_size(st: os.stat_result | None) -> int:
    """What a file with this metadata counts in its home's usage, for replacing it: a regular
    file's size, unless other hard links keep it (then replacing it frees nothing certain)."""
    return st.st_size if st is not None and statmod.S_ISREG(st.st_mode) and st.st_nlink == 1 else 0


def move(user: User, src: str, dst: str, *, overwrite: bool = False) -> Entry:
    """Rename or move within PFS (both ends writable by the user)."""
    s = _resolve(user, src, write=True)
    _refuse_root(s, "moved")
    d = _dest(user, s, _lstat(s), dst, overwrite)
    same_home = (s.area, s.owner, s.datacenter) == (d.area, d.owner, d.datacenter)
    d.parent.ensure_contained()
    with locked(d), _parent(s) as src_dir, _parent(d) as dst_dir:
        replaced = size_at(d.name, dst_dir, only_unlinked=True)
        if same_home:
            _rename(s, d, src_dir, dst_dir)
            usage.adjust(d, -replaced)
        else:
            size = size_at(s.name, src_dir)
            with usage.reserve(d, size - replaced) as held:
                _rename(s, d, src_dir, dst_dir)
                held.settle(size - replaced)
            usage.adjust(s, -size)
    return stat(user, d.virtual)


def _rename(s: PfsPath, d: PfsPath, src_dir: int, dst_dir: int) -> None:
    """`os.replace` by name in the two open parents. EINVAL: a job moved directories since
    `_dest` checked, and `d` now lies inside `s`; the kernel refuses that rename."""
    try:
        os.replace(s.name, d.name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
    except OSError as e:
        if e.errno == errno.EINVAL:
            raise PathError(f"cannot put {s.virtual} inside itself", 409) from None
        raise


def copy(user: User, src: str, dst: str, *, overwrite: bool = False) -> Entry:
    """Copy a file or a directory tree within PFS (links inside a tree are skipped). Every
    byte is reserved against the quota before it is written: a copy stops at the quota."""
    s = _resolve(user, src)
    _lstat(s)
    src_fd = _open(s, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(src_fd)
        d = _dest(user, s, st, dst, overwrite)
        with usage.reserve(d, 0) as held:
            # What the source holds now is refused at once if it does not fit; the copy then
            # charges what it really writes (a tree may grow meanwhile).
            held.ensure(tree_size_fd(src_fd))
            if statmod.S_ISDIR(st.st_mode):
                _copy_dir(src_fd, d, held)
            elif statmod.S_ISREG(st.st_mode):
                if s.area == "home" and st.st_nlink > 1:
                    raise PathError(f"{s.virtual}: {HARD_LINKED}", 403)
                name, size = copy_to_temp(d, src_fd, held.charge)
                try:
                    put_in_place(d, name, size, held)
                finally:
                    discard_temp(d, name)
            else:
                raise PathError(f"{s.virtual} is not a regular file", 409)
    finally:
        os.close(src_fd)
    return stat(user, d.virtual)


def _copy_dir(src_fd: int, d: PfsPath, held: usage.Reservation) -> None:
    """Copy the open directory into a hidden temporary one beside `d`, renamed onto `d` when whole."""
    tmp = f".copying-{uuid.uuid4().hex}"
    d.parent.ensure_contained()
    with d.parent_fd() as parent:
        os.mkdir(tmp, 0o755, dir_fd=parent)
        try:
            tmp_fd = os.open(tmp, DIRECTORY, dir_fd=parent)
            try:
                size = copy_tree(src_fd, tmp_fd, held.charge)
            finally:
                os.close(tmp_fd)
            with locked(d):
                if _lstat_at(d, parent) is not None:
                    raise PathError(f"{d.virtual} was created meanwhile: copy again to replace it", 409)
                os.rename(tmp, d.name, src_dir_fd=parent, dst_dir_fd=parent)
                held.settle(size)
        except BaseException:
            remove_at(tmp, parent)
            raise


def write_file(user: User, path: str, chunks: Iterable[bytes], *, length: int | None, overwrite: bool = True) -> Entry:
    """A one-shot upload: stream `chunks` to a temporary file and rename it onto `path`. The
    bytes are reserved against the quota before they are written: all `length` of them up
    front when it is known (replacing a file needs room for the difference), else as they come."""
    p = _resolve(user, path, write=True)
    _refuse_root(p, "replaced")
    st = lstat_or_none(p)
    if st is not None and statmod.S_ISDIR(st.st_mode):
        raise PathError(f"{p.virtual} is a directory", 409)
    if not overwrite and st is not None:
        raise PathError(f"{p.virtual} already exists (overwrite=true replaces it)", 409)
    old = counted_size(st)

    def counted(held: usage.Reservation) -> Iterator[bytes]:
        written = 0
        for chunk in chunks:
            written += len(chunk)
            if length is not None and written > length:
                raise PathError(f"expected {length} bytes, received more", 400)
            if length is None:
                held.charge(len(chunk))
            yield chunk
        if length is not None and written != length:
            raise PathError(f"expected {length} bytes, received {written}", 400)

    with usage.reserve(p, (length or 0) - old) as held:
        name, size = write_temp(p, counted(held))
        try:
            make_dirs(p.parent)
            put_in_place(p, name, size, held, overwrite=overwrite)
        finally:
            discard_temp(p, name)
    return stat(user, p.virtual)


def put_in_place(p: PfsPath, name: str, size: int, held: usage.Reservation, *, overwrite: bool = True) -> None:
    """Atomically rename the finished temporary file `name` of `p`'s scratch directory onto `p`
    and settle `held`, first grown to what the file really adds (the file it replaces may have
    changed since the write was admitted)."""
    with locked(p), scratch_fd(p) as scratch, _parent(p) as fd:
        p.ensure_contained()  # re-check: a symlink could have been planted meanwhile
        st = _lstat_at(p, fd)
        if st is not None and statmod.S_ISDIR(st.st_mode):
            raise PathError(f"{p.virtual} is a directory", 409)
        if not overwrite and st is not None:
            raise PathError(f"{p.virtual} already exists (overwrite=true replaces it)", 409)
        old = counted_size(st)
        held.ensure(size - old)
        os.replace(name, p.name, src_dir_fd=scratch, dst_dir_fd=fd)
        held.settle(size - old)
