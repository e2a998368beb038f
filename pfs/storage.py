"""Storage operations on checked PFS paths. Writes stream to a temporary file and rename into
place, so readers never see a partial file; archives are unpacked member by member through
the same path checks as everything else.

Jobs write to homes too, so a directory checked here may be swapped for a symbolic link before
it is used. Changes are therefore made by name relative to a directory descriptor opened
race-free below the home (`PfsPath.parent_fd`), never through a path string."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tarfile
import uuid
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .paths import RESERVED_NAME, PathError, PfsPath, open_beneath

CHUNK = 1 << 20
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC  # never an existing file or link
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_temp_at(dir_fd: int, prefix: str, chunks: Iterable[bytes]) -> tuple[str, int]:
    """Stream `chunks` into a new temporary file in directory `dir_fd`; removed again if
    anything fails. Returns (name, size)."""
    name = f"{prefix}{uuid.uuid4().hex}"
    fd = os.open(name, _NEW_FILE, 0o600, dir_fd=dir_fd)
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                size += len(chunk)
    except BaseException:
        _unlink_at(name, dir_fd)
        raise
    return name, size


def _unlink_at(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def is_dir_at(name: str, dir_fd: int) -> bool:
    """Whether `name` in `dir_fd` is a directory itself (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def make_dirs(p: PfsPath) -> None:
    """`mkdir -p`, one level at a time below the area root: each level is checked, then
    created in its parent opened race-free, so no link met on the way is followed out."""
    p.root.mkdir(parents=True, exist_ok=True)  # a new user's home exists from their first write
    cur = PfsPath(p.datacenter, p.area, p.owner, ())
    for part in p.parts:
        cur = cur.child(part)
        cur.ensure_contained()
        with cur.parent_fd() as fd:
            try:
                os.mkdir(part, dir_fd=fd)
            except FileExistsError:
                if not stat.S_ISDIR(os.stat(part, dir_fd=fd).st_mode):
                    raise PathError(f"{cur.virtual} exists and is not a directory", 409) from None


def save_stream(dest: PfsPath, chunks: Iterable[bytes]) -> int:
    """Write `chunks` to `dest` atomically; returns the byte count."""
    dest.parent.ensure_contained()
    with dest.parent_fd() as fd:
        if is_dir_at(dest.name, fd):
            raise PathError(f"{dest.virtual} is a directory", 409)
        tmp, size = _write_temp_at(fd, ".upload-", chunks)
        try:
            dest.ensure_contained()  # re-check: a symlink could have been planted meanwhile
            os.replace(tmp, dest.name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            _unlink_at(tmp, fd)
            raise
    return size


def copy_tree(src_fd: int, dst_fd: int) -> None:
    """Copy the tree in directory `src_fd` into the empty directory `dst_fd`, all by
    descriptor: links are skipped, and neither side can be led elsewhere meanwhile."""
    stack: list[tuple[Iterator[os.DirEntry], int, int]] = []
    try:
        s, d = os.dup(src_fd), os.dup(dst_fd)
        stack.append((os.scandir(s), s, d))
        while stack:
            entries, s, d = stack[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                os.close(s)
                os.close(d)
                stack.pop()
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(entry.name, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) | 0o700, dir_fd=d)
                child_s = os.open(entry.name, _DIRECTORY, dir_fd=s)
                try:
                    child_d = os.open(entry.name, _DIRECTORY, dir_fd=d)
                except BaseException:
                    os.close(child_s)
                    raise
                stack.append((os.scandir(child_s), child_s, child_d))
            elif entry.is_file(follow_symlinks=False):
                _copy_file_at(entry.name, s, d)
    finally:
        for entries, s, d in stack:
            entries.close()
            os.close(s)
            os.close(d)


def _copy_file_at(name: str, src_dir: int, dst_dir: int) -> None:
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        st = os.fstat(src)
        dst = os.open(name, _NEW_FILE, stat.S_IMODE(st.st_mode), dir_fd=dst_dir)
        try:
            offset = 0
            while sent := os.sendfile(dst, src, offset, max(st.st_size - offset, CHUNK)):
                offset += sent
        finally:
            os.close(dst)
    finally:
        os.close(src)


def file_chunks(f: BinaryIO, size: int = CHUNK) -> Iterable[bytes]:
    while chunk := f.read(size):
        yield chunk


def is_archive(filename: str) -> bool:
    return filename.lower().endswith(ARCHIVE_SUFFIXES)


def extract_archive(dest: PfsPath, f: BinaryIO, filename: str) -> int:
    """Unpack a .zip/.tar(.gz) into directory `dest`; returns the number of files written.
    Links, devices and members escaping `dest` are refused."""
    count = 0
    if filename.lower().endswith(".zip"):
        with zipfile.ZipFile(f) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise PathError(f"{info.filename}: symbolic links are not allowed in a package")
                target = dest.child(info.filename)
                make_dirs(target.parent)
                with archive.open(info) as member:
                    save_stream(target, file_chunks(member))
                count += 1
        return count
    with tarfile.open(fileobj=f, mode="r:*") as archive:
        for member in archive:
            if member.isdir():
                continue
            if not member.isfile():
                raise PathError(f"{member.name}: only regular files are allowed in a package")
            target = dest.child(member.name)
            make_dirs(target.parent)
            save_stream(target, file_chunks(archive.extractfile(member)))
            count += 1
    return count


def staging_dir(home: PfsPath) -> PfsPath:
    """A fresh hidden directory in the user's home, for uploads put in place only when complete."""
    staged = home.child(RESERVED_NAME, uuid.uuid4().hex)
    make_dirs(staged)
    return staged


def replace_dir(staged: PfsPath, dest: PfsPath) -> None:
    """Put the staged directory at `dest`, replacing what was there. Counts against the
    storage quota of `dest`'s home: raises QuotaExceeded (a PathError) when it does not fit."""
    from . import usage

    dest.parent.ensure_contained()
    make_dirs(dest.parent)
    new_size = usage.tree_size(staged.disk)
    old = f"{staged.name}.old"
    with dest.parent_fd() as dest_dir, staged.parent_fd() as staged_dir:
        with locked(dest):
            replaced = usage.tree_size(dest.disk)
            usage.check_room(dest, new_size, replaced_bytes=replaced)
            try:
                os.rename(dest.name, old, src_dir_fd=dest_dir, dst_dir_fd=staged_dir)
            except FileNotFoundError:
                old = ""
            os.rename(staged.name, dest.name, src_dir_fd=staged_dir, dst_dir_fd=dest_dir)
            usage.adjust(dest, new_size - replaced)
        if old:
            remove_at(old, staged_dir)


def remove_at(name: str, dir_fd: int) -> None:
    """Remove `name` in `dir_fd`, a whole tree if it is a directory (links are not followed)."""
    if is_dir_at(name, dir_fd):
        shutil.rmtree(name, dir_fd=dir_fd, ignore_errors=True)
    else:
        _unlink_at(name, dir_fd)


def remove(p: PfsPath) -> None:
    """Remove `p`, a whole tree if it is a directory, by name in its parent opened race-free."""
    try:
        with p.parent_fd() as fd:
            remove_at(p.name, fd)
    except FileNotFoundError:
        pass


def scratch_dir(p: PfsPath) -> Path:
    """Where partial data for `p` is kept: the hidden `.uploads` of its home (or of public), on
    the same filesystem as `p` so the final rename is atomic, and never listed."""
    from django.conf import settings

    base = p.root if p.area == "home" else settings.PFS_ROOT / p.datacenter / ".public"
    d = base / RESERVED_NAME
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def scratch_fd(p: PfsPath) -> Iterator[int]:
    """`scratch_dir(p)` opened; in a home race-free below it, since a job could swap
    `.uploads` for a link."""
    d = scratch_dir(p)
    if p.area == "home":
        fd = open_beneath(p.root, (RESERVED_NAME,), os.O_RDONLY | os.O_DIRECTORY, virtual=p.virtual)
    else:
        fd = os.open(d, _DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def locked(p: PfsPath):
    """Serialize replacements within one home (or public) across processes on this host, so
    the size a replaced file had and the usage change stay consistent."""
    with scratch_fd(p) as scratch:
        fd = os.open(".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=scratch)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def sparse_temp(p: PfsPath, size: int) -> Path:
    """A new temporary file of `size` bytes, all a hole (no disk used), in `p`'s scratch
    directory. The caller puts it in place (services.put_in_place) or removes it."""
    name = f"sparse-{uuid.uuid4().hex}"
    with scratch_fd(p) as scratch:
        fd = os.open(name, _NEW_FILE, 0o600, dir_fd=scratch)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
    return scratch_dir(p) / name


def write_temp(p: PfsPath, chunks: Iterable[bytes]) -> tuple[Path, int]:
    """Stream `chunks` into a new temporary file in `p`'s scratch directory; returns (path,
    size). The caller puts it in place (services.put_in_place) or removes it."""
    with scratch_fd(p) as scratch:
        name, size = _write_temp_at(scratch, "put-", chunks)
    return scratch_dir(p) / name, size
