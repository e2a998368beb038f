"""Job packages put into a home: uploaded files, or one .zip/.tar(.gz) unpacked member by member
through the same path checks as everything else, staged in the home's scratch directory and moved in
place only when whole, every byte reserved against the home's quota before it is written."""

from __future__ import annotations

import os
import tarfile
import zipfile
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from . import usage
from .paths import PathError, PfsPath
from .storage import file_chunks, locked, make_dirs, remove, remove_at, save_stream, size_at, staging_dir

if TYPE_CHECKING:
    from django.core.files.uploadedfile import UploadedFile

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


def is_archive(filename: str) -> bool:
    return filename.lower().endswith(ARCHIVE_SUFFIXES)


def extract_archive(dest: PfsPath, f: IO[bytes], filename: str, held: usage.Reservation) -> int:
    """Unpack a .zip/.tar(.gz) into directory `dest`; returns the number of files written.
    Links, devices and members escaping `dest` are refused. A zip's declared sizes are
    reserved first (a bomb that says what it is stops before any byte is written), and every
    byte is charged as it is written, whatever the archive declares."""
    count = 0
    if filename.lower().endswith(".zip"):
        with zipfile.ZipFile(f) as archive:
            members = [info for info in archive.infolist() if not info.is_dir()]
            held.ensure(held.count + sum(info.file_size for info in members))
            for info in members:
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise PathError(f"{info.filename}: symbolic links are not allowed in a package")
                target = dest.child(info.filename)
                make_dirs(target.parent)
                with archive.open(info) as member:
                    save_stream(target, file_chunks(member), held.charge)
                count += 1
        return count
    with tarfile.open(fileobj=f, mode="r:*") as archive:
        for entry in archive:
            if entry.isdir():
                continue
            data = archive.extractfile(entry) if entry.isfile() else None
            if data is None:
                raise PathError(f"{entry.name}: only regular files are allowed in a package")
            target = dest.child(entry.name)
            make_dirs(target.parent)
            save_stream(target, file_chunks(data), held.charge)
            count += 1
    return count


def save_package(dest: PfsPath, files: Sequence[UploadedFile[bytes]]) -> None:
    """Put uploaded files (Django UploadedFiles, each with an optional `relative_path`), or the
    contents of one .zip/.tar(.gz), at the directory `dest`, replacing what was there. Staged in
    the home's scratch directory and moved in place only when whole; every byte is reserved against
    the home's quota before it is written. Raises PathError (QuotaExceeded when it does not fit);
    on any error nothing is left behind."""
    home = PfsPath(dest.datacenter, dest.area, dest.owner, ())
    with usage.reserve(dest, 0) as held:
        staged = staging_dir(home)
        try:
            for f in files:
                if f.name is None:
                    raise PathError("every file of a package needs a name")
                if len(files) == 1 and is_archive(f.name):
                    extract_archive(staged, f, f.name, held)
                else:
                    target = staged.child(getattr(f, "relative_path", None) or f.name)
                    make_dirs(target.parent)
                    save_stream(target, f.chunks(), held.charge)
            replace_dir(staged, dest, held)
        finally:
            remove(staged, measure=False)


def replace_dir(staged: PfsPath, dest: PfsPath, held: usage.Reservation) -> None:
    """Put the staged directory at `dest`, replacing what was there, and settle `held` (which
    the staged bytes were charged to) into the usage of `dest`'s home."""
    dest.parent.ensure_contained()
    make_dirs(dest.parent)
    old = f"{staged.name}.old"
    with dest.parent_fd() as dest_dir, staged.parent_fd() as staged_dir:
        new_size = size_at(staged.name, staged_dir)
        with locked(dest):
            replaced = size_at(dest.name, dest_dir, only_unlinked=True)
            held.ensure(new_size - replaced)
            try:
                os.rename(dest.name, old, src_dir_fd=dest_dir, dst_dir_fd=staged_dir)
            except FileNotFoundError:
                old = ""
            os.rename(staged.name, dest.name, src_dir_fd=staged_dir, dst_dir_fd=dest_dir)
            held.settle(new_size - replaced)
        if old:
            remove_at(old, staged_dir)


def remove_package(dest: PfsPath) -> None:
    """Remove a package put in place by `save_package`; what it freed leaves the home's usage."""
    usage.adjust(dest, -remove(dest))
