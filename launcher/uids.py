"""The job uid range: uids that no account of the host and no other PaddleCloud instance uses.

Each user's jobs run as `first + user id` (`first` itself is the runtime builds' uid). At start
the launcher refuses a range holding a uid or gid of the host's accounts, and registers its range
under REGISTRY, holding a lock on it for its whole life, so a second instance on this host (a
test run beside a dev server, a second install) cannot start on an overlapping range and hand a
different user the same uid. A range whose launcher has died is free again: its lock went with it.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
from pathlib import Path

from .paths import Refused

REGISTRY = Path("/run/paddlecloud/uid-ranges")
LOWEST = 1000  # below: the system accounts of a typical host


def parse(text: str) -> range:
    """`"200000-299999"` -> the inclusive range."""
    try:
        first, last = (int(v) for v in text.split("-"))
    except ValueError:
        raise Refused(f"JOB_UIDS must read FIRST-LAST, not {text!r}") from None
    if not LOWEST <= first < last < 2**31 - 1:
        raise Refused(f"JOB_UIDS {text}: must lie within {LOWEST}-{2**31 - 2}, first below last")
    return range(first, last + 1)


def check_host(uids: range) -> None:
    """Refuse a range that holds a uid or gid of an account of this host."""
    for user in pwd.getpwall():
        if user.pw_uid in uids:
            raise Refused(f"JOB_UIDS {uids.start}-{uids.stop - 1} holds uid {user.pw_uid} of the host account "
                          f"{user.pw_name!r}: choose a range no account uses")
    for group in grp.getgrall():
        if group.gr_gid in uids:
            raise Refused(f"JOB_UIDS {uids.start}-{uids.stop - 1} holds gid {group.gr_gid} of the host group "
                          f"{group.gr_name!r}: choose a range no group uses")


def hold(uids: range, registry: Path = REGISTRY) -> int:
    """Register `uids` for this process's life (the returned descriptor holds the lock)."""
    registry.mkdir(parents=True, exist_ok=True, mode=0o755)
    with open(registry / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one instance at a time checks and registers
        for entry in registry.iterdir():
            if entry.name.startswith("."):
                continue
            try:
                first, last = (int(v) for v in entry.name.split("-"))
            except ValueError:
                continue
            other = range(first, last + 1)
            if other.start >= uids.stop or uids.start >= other.stop:
                continue
            fd = os.open(entry, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                raise Refused(f"JOB_UIDS {uids.start}-{uids.stop - 1} overlaps {entry.name}, which another "
                              f"PaddleCloud on this host holds ({holder}): give each instance a range of its own"
                              ) from None
            finally:
                os.close(fd)
            entry.unlink()  # its launcher is gone
        fd = os.open(registry / f"{uids.start}-{uids.stop - 1}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"launcher pid {os.getpid()}\n".encode(), 0)
        return fd
