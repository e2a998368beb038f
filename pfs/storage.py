"""Storage I/O on checked PFS paths, and nothing else: no quota or usage accounting (pfs.usage
sits above this module and charges writes through the `charge` callbacks these functions take).
Writes stream to a temporary file and rename into place, so readers never see a partial file.

Jobs write to homes too, so a directory checked here may be swapped for a symbolic link before
it is used. Changes are therefore made by name relative to a directory descriptor opened
race-free below the home (`PfsPath.parent_fd`), never through a path string. Partial data
(upload parts, temporary files, the lock file) lives in a scratch directory beside the areas,
which no job mounts (`scratch_fd`)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import IO, TYPE_CHECKING

from launcher import fdtree

from .paths import PathError, PfsPath, scratch_parts

if TYPE_CHECKING:
    from os import _ScandirIterator

CHUNK = 1 << 20
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC  # never an existing file or link
# A job can plant hard links in its home; the server cannot tell where the other names of such a
# file are, so it neither serves nor changes one (zips and tree copies leave them out).
HARD_LINKED = ("the file has other hard links, so the server does not serve, copy or change it "
               "(make a copy of your own inside your job first)")
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A tree copy holds three descriptors a level; a job nests directories without end, and the
# descriptors of a web process are every request's.
MAX_COPY_DEPTH = fdtree.HELD


def _write_temp_at(dir_fd: int, prefix: str, chunks: Iterable[bytes]) -> tuple[str, int]:
    """Stream `chunks` into a new temporary file in directory `dir_fd`; removed again if
    anything fails. Returns (name, size)."""
    name = f"{prefix}{uuid.uuid4().hex}"
    fd = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
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
    with suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


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


def metered(chunks: Iterable[bytes], charge: Callable[[int], None] | None) -> Iterator[bytes]:
    """`chunks`, each charged (to a usage.Reservation, which may refuse it) before it is written."""
    for chunk in chunks:
        if charge is not None:
            charge(len(chunk))
        yield chunk


def save_stream(dest: PfsPath, chunks: Iterable[bytes], charge: Callable[[int], None] | None = None) -> int:
    """Write `chunks` to `dest` atomically, charging each to `charge` first; returns the byte
    count. For files of a staged directory: their room is settled by `replace_dir`."""
    chunks = metered(chunks, charge)
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


def copy_tree(src_fd: int, dst_fd: int, charge: Callable[[int], None],
              leave_out: Iterable[tuple[int, int]] = ()) -> int:
    """Copy the tree in directory `src_fd` into the empty directory `dst_fd`, all by
    descriptor: links are skipped, and neither side can be led elsewhere meanwhile. Each
    file's size is charged before it is copied; returns the bytes copied. Should `dst_fd` lie
    inside the source (a job moving directories after the caller checked), the directories it
    makes are left out, so the copy never runs into itself; so are the directories `leave_out`
    names (fdtree.ident), wherever they are met. It holds three descriptors per level, so a
    tree deeper than MAX_COPY_DEPTH is refused (400) when the copy reaches that far."""
    total = 0
    stack: list[tuple[_ScandirIterator[str], int, int]] = []
    made = {fdtree.ident(os.fstat(dst_fd)), *leave_out}
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
                try:
                    child_s = os.open(entry.name, DIRECTORY, dir_fd=s)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # gone or replaced by a file since it was listed
                except OSError as e:
                    if e.errno != errno.ELOOP:
                        raise
                    continue  # replaced by a link since it was listed: not followed
                try:
                    st = os.fstat(child_s)
                    if fdtree.ident(st) in made:
                        os.close(child_s)
                        continue
                    os.mkdir(entry.name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=d)
                    child_d = os.open(entry.name, DIRECTORY, dir_fd=d)
                except BaseException:
                    os.close(child_s)
                    raise
                made.add(fdtree.ident(os.fstat(child_d)))
                stack.append((os.scandir(child_s), child_s, child_d))
                if len(stack) > MAX_COPY_DEPTH + 1:  # the top and that many levels below it
                    raise PathError(f"the tree is more than {MAX_COPY_DEPTH} levels deep: the server copies "
                                    "trees up to that depth (copy it in parts, or inside a job)", 400)
            elif entry.is_file(follow_symlinks=False):
                total += _copy_file_at(entry.name, s, d, charge)
    finally:
        for entries, s, d in stack:
            entries.close()
            os.close(s)
            os.close(d)
    return total


def _copy_file_at(name: str, src_dir: int, dst_dir: int, charge: Callable[[int], None]) -> int:
    """Copy one regular file (as it was when opened: a file growing meanwhile is cut there);
    hard-linked ones are left out (see HARD_LINKED)."""
    try:  # O_NONBLOCK: a FIFO swapped in meanwhile must not hang the server on open
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
    except OSError:
        return 0  # gone or replaced by a link since it was listed
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            return 0
        charge(st.st_size)
        dst = os.open(name, NEW_FILE, stat.S_IMODE(st.st_mode), dir_fd=dst_dir)
        try:
            return _copy_bytes(src, dst, st.st_size)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_bytes(src: int, dst: int, size: int) -> int:
    """The first `size` bytes of `src` into `dst` in the kernel (sendfile), fewer if `src` has
    shrunk meanwhile; the count copied. Every file copy (single files and trees) goes here."""
    offset = 0
    while offset < size and (sent := os.sendfile(dst, src, offset, min(size - offset, 1 << 30))):
        offset += sent
    return offset


def copy_to_temp(p: PfsPath, src: int, charge: Callable[[int], None]) -> tuple[str, int]:
    """Copy the open regular file `src` (as it is now: a file growing meanwhile is cut there)
    into a new temporary file in `p`'s scratch directory, its size charged first; returns the
    temporary file's name there and its size. The caller puts it in place or discards it."""
    size = os.fstat(src).st_size
    charge(size)
    name = f"copy-{uuid.uuid4().hex}"
    with scratch_fd(p) as scratch:
        dst = os.open(name, NEW_FILE, 0o600, dir_fd=scratch)
        try:
            try:
                return name, _copy_bytes(src, dst, size)
            finally:
                os.close(dst)
        except BaseException:
            _unlink_at(name, scratch)
            raise


def file_chunks(f: IO[bytes], size: int = CHUNK) -> Iterable[bytes]:
    while chunk := f.read(size):
        yield chunk


def staging_dir(home: PfsPath) -> PfsPath:
    """A fresh directory in the home's scratch directory, for uploads put in place only when
    complete (renamed into the home: the same filesystem)."""
    with scratch_fd(home) as scratch:
        name = uuid.uuid4().hex
        # An ordinary directory once put in place: jobs and pods running as another uid than
        # the service's must be able to enter it.
        os.mkdir(name, 0o755, dir_fd=scratch)
    return PfsPath(home.datacenter, "scratch", home.owner, (name,))


def remove_at(name: str, dir_fd: int) -> None:
    """Remove `name` in `dir_fd`, a whole tree if it is a directory (links are not followed)."""
    if is_dir_at(name, dir_fd):
        fdtree.remove(name, dir_fd)  # not shutil.rmtree: it recurses per level, and a job nests deeper
    else:
        _unlink_at(name, dir_fd)


def remove(p: PfsPath, *, measure: bool = True) -> int:
    """Remove `p`, a whole tree if it is a directory, by name in its parent opened race-free.
    Returns the bytes that frees (files with other hard links left out), measured first unless
    not `measure`d (staged data, which no usage counts); 0 when `p` is missing."""
    try:
        with p.parent_fd() as fd:
            freed = size_at(p.name, fd, only_unlinked=True) if measure else 0
            remove_at(p.name, fd)
    except FileNotFoundError:
        return 0
    return freed


def tree_size_fd(fd: int, *, only_unlinked: bool = False) -> int:
    """Bytes of the regular files in the open file or directory `fd`, each inode once; links
    are not followed (launcher.fdtree walks by descriptor, in a loop however deep the tree is,
    and skips a directory swapped for a link). With `only_unlinked`, files with other hard links
    are left out: removing them frees nothing certain."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) and not (only_unlinked and st.st_nlink > 1) else 0
    seen: set[tuple[int, int]] = set()
    total = 0
    for _path, dir_fd, _dirs, files in fdtree.walk(fd):
        for name in files:
            try:
                fst = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(fst.st_mode) or (only_unlinked and fst.st_nlink > 1):
                continue
            if fst.st_nlink > 1:
                key = fdtree.ident(fst)
                if key in seen:
                    continue
                seen.add(key)
            total += fst.st_size
    return total


def size_at(name: str, dir_fd: int, *, only_unlinked: bool = False) -> int:
    """`tree_size_fd` of the entry `name` in directory `dir_fd` (0 when missing or a link)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        return tree_size_fd(fd, only_unlinked=only_unlinked)
    finally:
        os.close(fd)


@contextmanager
def scratch_fd(p: PfsPath) -> Iterator[int]:
    """The scratch directory of `p`'s home (or of public), where partial data is kept: under
    PFS_ROOT/<dc>/ (the same filesystem as `p`, so the final rename is atomic), beside the
    areas, never inside one, so no job (which mounts only its home and public) reaches it.
    Created 0700 when missing; each level is opened without following links."""
    from django.conf import settings

    base = settings.PFS_ROOT / p.datacenter
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, DIRECTORY)
    try:
        for name in scratch_parts(p):
            with suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=fd)
            step = os.open(name, DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = step
        yield fd
    finally:
        os.close(fd)


def open_lock(p: PfsPath) -> int:
    """A descriptor of the lock file of `p`'s home (or public), for `holding`; the caller
    closes it. One opened once serves many short holds (a chunk's batches)."""
    with scratch_fd(p) as scratch:
        return os.open(".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=scratch)


LOCK_WAIT = 10.0  # seconds: only the service takes the lock, briefly; still, no server thread waits longer


@contextmanager
def holding(lock_fd: int) -> Iterator[None]:
    """Hold the lock `open_lock` gave, exclusively, for the block; 409 after LOCK_WAIT."""
    deadline, pause = time.monotonic() + LOCK_WAIT, 0.001
    while True:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise PathError("another request is changing files in this home: try again later", 409) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    try:
        yield
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)


@contextmanager
def locked(p: PfsPath) -> Iterator[None]:
    """Serialize replacements within one home (or public) across processes on this host, so
    the size a replaced file had and the usage change stay consistent."""
    fd = open_lock(p)
    try:
        with holding(fd):
            yield
    finally:
        os.close(fd)


def sparse_temp(p: PfsPath, size: int) -> str:
    """A new temporary file of `size` bytes, all a hole (no disk used), in `p`'s scratch
    directory; its name there. The caller puts it in place (services.put_in_place) or
    discards it (`discard_temp`)."""
    name = f"sparse-{uuid.uuid4().hex}"
    with scratch_fd(p) as scratch:
        fd = os.open(name, NEW_FILE, 0o600, dir_fd=scratch)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
    return name


def write_temp(p: PfsPath, chunks: Iterable[bytes]) -> tuple[str, int]:
    """Stream `chunks` into a new temporary file in `p`'s scratch directory; returns its name
    there and its size. The caller puts it in place (services.put_in_place) or discards it."""
    with scratch_fd(p) as scratch:
        return _write_temp_at(scratch, "put-", chunks)


def discard_temp(p: PfsPath, name: str) -> None:
    """Remove a temporary file of `p`'s scratch directory (fine if it is gone)."""
    with scratch_fd(p) as scratch:
        _unlink_at(name, scratch)
