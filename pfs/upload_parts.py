"""The part file of a resumable upload (pfs.uploads): `<id>.part` in the scratch directory of
the upload's home (storage.scratch_fd: outside the home, where no job reaches it), whose
length is the upload's offset."""

from __future__ import annotations

import os

from .models import UploadSession, part_file_name
from .paths import PfsPath
from .storage import scratch_fd


def area(session: UploadSession) -> PfsPath:
    """The home (or public) the upload goes to: its scratch directory holds the part file."""
    parts = session.path.split("/")
    return PfsPath(parts[2], parts[3], parts[4] if parts[3] == "home" else None, ())


def part_name(session: UploadSession) -> str:
    """The part file's name in the scratch directory of the upload's home."""
    return part_file_name(session.id)


def open_part(session: UploadSession, dest: PfsPath, flags: int = os.O_RDWR) -> int:
    """The part file of an upload to `dest`; FileNotFoundError when it is gone (cancelled, or
    started before partial data moved out of homes)."""
    with scratch_fd(dest) as scratch:
        return os.open(part_name(session), flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=scratch)


def part_size(session: UploadSession) -> int:
    if session.completed:
        return session.size
    try:
        with scratch_fd(area(session)) as scratch:
            return os.stat(part_name(session), dir_fd=scratch, follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0
