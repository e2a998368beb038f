"""Handing files to a job uid: `share` (homes and working copies) and `give` (runtime builds).

`share` leaves every owner as it is and gives the job uid and the service account read-write
POSIX ACL entries on each entry (with default entries on directories, so what either of them
creates later is the other's too): the service keeps serving a home whose files a job wrote, the
job reads what its user uploaded, and no other uid reaches any of it (`other` has nothing, but
`x` on the top directory for bwrap, which enters it as a capability-less root). A job may strip
the entries from files it made itself; that only hides its own user's files from the service,
until the next `share` (each launch and each job's end) puts them back.

`give` makes the job uid (or the service account) the owner, for a runtime build's virtualenv:
writable by the build uid only while it builds, the service's again after.

Both walk below a directory opened race-free, by name inside directories opened without
following links (fdtree: in a loop, so no depth a job makes stops it), so a job swapping a
directory for a link mid-walk changes nothing outside it; symbolic links are left alone. Each
entry is opened (O_PATH, never following a link) and judged by that descriptor's fstat, and the
change goes through the same descriptor: a name swapped meanwhile (for a hard link to a root
file, say) is not what gets changed. Files with more than one hard link are left alone unless
the job uid owns them: another name of theirs may be outside (a service file linked into a
home, or /etc/shadow where fs.protected_hardlinks is 0), and changing it would hand it over.
(One link is no proof that it lies in the tree: a job that may link a file can remove its link
there after the open. The launcher starts as root only with protected_hardlinks=1 (__main__),
where nobody links a file they may not write.)

The ACL goes in as the kernel's `system.posix_acl_*` extended attributes (the layout of
linux/posix_acl_xattr.h), set through the entry's descriptor: libacl's Python binding
(pylibacl) ships no wheels and works on paths.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator

from . import fdtree

ACCESS, DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
USER_OBJ, USER, GROUP_OBJ, MASK, OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
UNDEFINED = 0xFFFFFFFF


def acl(perm: int, users: list[int], other: int) -> bytes:
    """An ACL as the xattr holds it (version 2, entries sorted by tag, then by id): `perm` for the
    owner and each of `users`, nothing for the group, `other` for everyone else."""
    entries = [(USER_OBJ, perm, UNDEFINED), *((USER, perm, uid) for uid in sorted(set(users))),
               (GROUP_OBJ, 0, UNDEFINED), (MASK, perm, UNDEFINED), (OTHER, other, UNDEFINED)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, uid) for tag, perm, uid in entries)


def _entries(top_fd: int) -> Iterator[tuple[int, bool, os.stat_result]]:
    """(fd, is the top, its fstat) for `top_fd` and each entry below it, the top first. Each
    entry's fd is O_PATH (opening a FIFO or a device for real would block or act) and only valid
    until the next one is yielded; fchown/fsetxattr refuse O_PATH, so _at(fd) names it."""
    yield top_fd, True, os.fstat(top_fd)
    for _path, dirfd, dirnames, filenames in fdtree.walk(top_fd):  # not os.fwalk: it recurses per level
        for name in dirnames + filenames:
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
            except FileNotFoundError:  # removed by a running job meanwhile
                continue
            try:
                yield fd, False, os.fstat(fd)
            finally:
                os.close(fd)


def _at(fd: int) -> str:
    """The file `fd` holds, as a path: the kernel resolves it to that inode, whatever its name is now."""
    return f"/proc/self/fd/{fd}"


def _ours(st: os.stat_result, uid: int) -> bool:
    if stat.S_ISLNK(st.st_mode):
        return False
    return stat.S_ISDIR(st.st_mode) or st.st_nlink == 1 or st.st_uid == uid


def share(top_fd: int, uid: int, service_uid: int) -> None:
    for fd, top, st in _entries(top_fd):
        if not _ours(st, uid) or st.st_uid not in (uid, service_uid):
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        perm = 7 if is_dir or st.st_mode & stat.S_IXUSR else 6
        other = 1 if top else 0  # bwrap enters the top as root without capabilities
        os.setxattr(_at(fd), ACCESS, acl(perm, [uid, service_uid], other))
        if is_dir:
            os.setxattr(_at(fd), DEFAULT, acl(7, [uid, service_uid], 0))


def give(top_fd: int, uid: int) -> None:
    for fd, _top, st in _entries(top_fd):
        if st.st_uid != uid and _ours(st, uid):
            os.chown(_at(fd), uid, uid)
