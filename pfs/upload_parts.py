"""The part file of a resumable upload (pfs.uploads): `<home>/.uploads/<id>.part`, whose length
is the upload's offset. The upload's owner's jobs write that home too, so the part is only ever
opened by descriptor below the home, and what a job put in its place is refused, never used."""

from __future__ import annotations

import os
import stat

from .models import UploadSession, part_file_name
from .paths import PathError, PfsPath
from .storage import scratch_fd


def area(session: UploadSession) -> PfsPath:
    """The home (or public) the upload goes to: its scratch directory holds the part file."""
    parts = session.path.split("/")
    return PfsPath(parts[2], parts[3], parts[4] if parts[3] == "home" else None, ())


def part_name(session: UploadSession) -> str:
    """The part file's name in the scratch directory (`.uploads`) of the upload's home."""
    return part_file_name(session.id)


def open_part(session: UploadSession, dest: PfsPath, flags: int = os.O_RDWR) -> int:
    """The part file of an upload to `dest`, opened in the scratch directory (race-free below a
    home: jobs write to homes too, and could swap `.uploads` for a link). A job may also have
    put a link, directory, FIFO or hard link in its place: refused (409), never followed, never
    waited on; FileNotFoundError when it is gone."""
    with scratch_fd(dest) as scratch:
        try:  # O_NONBLOCK: opening a FIFO must not hang the server
            fd = os.open(part_name(session), flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=scratch)
        except FileNotFoundError:
            raise
        except OSError as e:  # ELOOP (a link), EISDIR, EACCES (chmod), ...
            raise PathError(f"the upload's data was replaced ({e.strerror}): start a new upload", 409) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise PathError("the upload's data was replaced (not a file of its own): start a new upload", 409)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def part_size(session: UploadSession) -> int:
    if session.completed:
        return session.size
    try:
        with scratch_fd(area(session)) as scratch:
            st = os.stat(part_name(session), dir_fd=scratch, follow_symlinks=False)
    except FileNotFoundError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0
