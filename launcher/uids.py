"""The job uid range: uids that no account of the host and no other PaddleCloud instance uses.

Each user's jobs run as `first + user id` (`first` itself is the runtime builds' uid). At start
the launcher refuses a range holding a uid or gid of the host's accounts or overlapping a range
/etc/subuid or /etc/subgid hands out (a host user's rootless containers run as those: as job uids
they would run as a PaddleCloud user), and registers its range
under REGISTRY, holding a lock on it for its whole life, so a second instance on this host (a
test run beside a dev server, a second install) cannot start on an overlapping range and hand a
different user the same uid. A range whose launcher has died is free again: its lock went with it.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import re
from collections.abc import Iterator
from pathlib import Path

from .paths import Refused

REGISTRY = Path("/run/paddlecloud/uid-ranges")
LOWEST = 1000  # below: the system accounts of a typical host
# The default range: 65536 ids from 0x70000000, in what systemd's UIDS-GIDS document leaves unused
# (1879048192-2147483647), so above useradd's subordinate ranges (SUB_UID_MAX 600100000 by default),
# LXD's (1000000-1000999999 without /etc/subuid) and systemd-nspawn's (524288-1879048191), and
# below 2**31, which some file systems and syscalls mishandle.
DEFAULT = "1879048192-1879113727"
# Subordinate ids (shadow's newuidmap/newgidmap map them into a user's namespaces): `name:start:count`.
SUBID_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))
SUBID_ENTRY = re.compile(r"([^:#\s][^:]*):(\d{1,10}):(\d{1,10})")


def parse(text: str) -> range:
    """`"1879048192-1879113727"` -> the inclusive range."""
    try:
        first, last = (int(v) for v in text.split("-"))
    except ValueError:
        raise Refused(f"JOB_UIDS must read FIRST-LAST, not {text!r}") from None
    if not LOWEST <= first < last < 2**31 - 1:
        raise Refused(f"JOB_UIDS {text}: must lie within {LOWEST}-{2**31 - 2}, first below last")
    return range(first, last + 1)


def subordinate(files: tuple[Path, ...]) -> Iterator[tuple[Path, str, range]]:
    """(file, owner, ids) of each entry of `files`; a missing file holds none. Comments, malformed
    lines and empty ranges are skipped: newuidmap grants nothing from them either."""
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            continue
        except OSError as e:  # unreadable: cannot tell what it hands out
            raise Refused(f"cannot read {path} to check JOB_UIDS against it: {e}") from None
        for line in text.splitlines():
            match = SUBID_ENTRY.fullmatch(line.strip())
            if match and int(match[3]):
                yield path, match[1], range(int(match[2]), int(match[2]) + int(match[3]))


def check_host(uids: range, subid_files: tuple[Path, ...] | None = None) -> None:
    """Refuse a range that holds a uid or gid of an account of this host, or that overlaps
    subordinate ids of one (SUBID_FILES unless `subid_files`)."""
    for user in pwd.getpwall():
        if user.pw_uid in uids:
            raise Refused(f"JOB_UIDS {uids.start}-{uids.stop - 1} holds uid {user.pw_uid} of the host account "
                          f"{user.pw_name!r}: choose a range no account uses")
    for group in grp.getgrall():
        if group.gr_gid in uids:
            raise Refused(f"JOB_UIDS {uids.start}-{uids.stop - 1} holds gid {group.gr_gid} of the host group "
                          f"{group.gr_name!r}: choose a range no group uses")
    for path, owner, ids in subordinate(SUBID_FILES if subid_files is None else subid_files):
        if ids.start < uids.stop and uids.start < ids.stop:
            raise Refused(f"JOB_UIDS {uids.start}-{uids.stop - 1} overlaps {ids.start}-{ids.stop - 1}, the subordinate "
                          f"ids {path} gives {owner!r} (its rootless containers run as them): choose a range "
                          f"no subordinate range covers")


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
