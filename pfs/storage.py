"""Storage operations on checked PFS paths. Writes stream to a temporary file and rename into
place, so readers never see a partial file; archives are unpacked member by member through
the same path checks as everything else."""

from __future__ import annotations

import fcntl
import os
import shutil
import tarfile
import tempfile
import uuid
import zipfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .paths import PathError, PfsPath

CHUNK = 1 << 20
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


def _write_temp_file(directory: Path, prefix: str, suffix: str, chunks: Iterable[bytes]) -> tuple[Path, int]:
    """Stream `chunks` into a new temporary file in `directory`; removed again if anything fails."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                size += len(chunk)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp), size


def save_stream(dest: PfsPath, chunks: Iterable[bytes]) -> int:
    """Write `chunks` to `dest` atomically; returns the byte count."""
    dest.parent.ensure_contained()
    if dest.disk.is_dir():
        raise PathError(f"{dest.virtual} is a directory", 409)
    tmp, size = _write_temp_file(dest.disk.parent, ".upload-", "", chunks)
    try:
        dest.ensure_contained()  # re-check: a symlink could have been planted meanwhile
        os.replace(tmp, dest.disk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


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
                target.disk.parent.mkdir(parents=True, exist_ok=True)
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
            target.disk.parent.mkdir(parents=True, exist_ok=True)
            save_stream(target, file_chunks(archive.extractfile(member)))
            count += 1
    return count


def staging_dir(home: PfsPath) -> PfsPath:
    """A fresh hidden directory in the user's home, for uploads put in place only when complete."""
    staged = home.child(".uploads", uuid.uuid4().hex)
    staged.disk.mkdir(parents=True)
    return staged


def replace_dir(staged: PfsPath, dest: PfsPath) -> None:
    """Put the staged directory at `dest`, replacing what was there. Counts against the
    storage quota of `dest`'s home: raises QuotaExceeded (a PathError) when it does not fit."""
    from . import usage

    dest.parent.ensure_contained()
    dest.disk.parent.mkdir(parents=True, exist_ok=True)
    new_size = usage.tree_size(staged.disk)
    with locked(dest):
        replaced = usage.tree_size(dest.disk)
        usage.check_room(dest, new_size, replaced_bytes=replaced)
        old = None
        if dest.disk.exists() or dest.disk.is_symlink():
            old = staged.disk.with_name(staged.disk.name + ".old")
            os.rename(dest.disk, old)
        os.rename(staged.disk, dest.disk)
        usage.adjust(dest, new_size - replaced)
    if old:
        remove_tree(old)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def scratch_dir(p: PfsPath) -> Path:
    """Where partial data for `p` is kept: the hidden `.uploads` of its home (or of public), on
    the same filesystem as `p` so the final rename is atomic, and never listed."""
    from django.conf import settings

    from .paths import RESERVED_NAME

    base = p.root if p.area == "home" else settings.PFS_ROOT / p.datacenter / ".public"
    d = base / RESERVED_NAME
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def locked(p: PfsPath):
    """Serialize replacements within one home (or public) across processes on this host, so
    the size a replaced file had and the usage change stay consistent."""
    fd = os.open(scratch_dir(p) / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_temp(p: PfsPath, chunks: Iterable[bytes]) -> tuple[Path, int]:
    """Stream `chunks` into a new temporary file beside `p`'s home; returns (path, size).
    The caller renames it into place or removes it."""
    return _write_temp_file(scratch_dir(p), "put-", ".part", chunks)
