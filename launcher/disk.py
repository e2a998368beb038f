"""What a replica's directories cost its disk limit, as the keeper measures them (keeper_main.py).

The keeper runs as root outside the replica's cgroup and is spared by the OOM killer, so what a
measure costs it must be bounded by what the replica is limited by, whatever the replica makes:
every name counts (a hard link too), the walk reads each directory as it goes (fdtree.entries)
and stops as soon as the limit is reached. With every name at least NAME_BYTES, one measure
reads at most limit / NAME_BYTES names and keeps at most that many subdirectory names and file
identities (~100 to 400 bytes of memory each, a few microseconds each).

Loaded by the keeper when it first measures, so it imports only os, stat (which os itself
loads) and fdtree: see keeper_main's imports.
"""

import os
import stat

from . import fdtree

# What a name costs at least: a block of the filesystem. An empty file takes an inode and no block,
# a hard link only its name: without this a job could use up the filesystem's inodes, or make
# millions of names (each costing the keeper memory and time), while its usage stayed 0.
NAME_BYTES = 4096


def usage(dir_fds: list[int], limit: int = 0) -> int:
    """Bytes the directories and everything below them cost, or, with `limit`, as soon as that
    reaches it, at least `limit` (what was not read yet is left out: the replica is over anyway).

    The rule: each name costs at least NAME_BYTES, and the first name of each file met costs its
    allocated blocks if more; a further name of a file already counted (a hard link, here or in
    another of the directories) costs NAME_BYTES alone, as does a name gone before it was measured.
    """
    counted: set[int] = set()  # files with more than one name, counted once: (st_dev << 64) | st_ino
    total = 0
    for top in dir_fds:
        total += _cost(os.fstat(top), counted)  # a directory of many entries grows itself
        try:
            for _fd, entry in fdtree.entries(top):
                if limit and total >= limit:
                    return total  # enough: reading on would cost the keeper more for nothing
                try:
                    total += _cost(entry.stat(follow_symlinks=False), counted)
                except OSError:
                    total += NAME_BYTES  # removed meanwhile; it was there, and reading it cost
        except OSError:
            continue  # fdtree.Moved: the job moves its directories about; what was counted counts
    return total


def _cost(st: os.stat_result, counted: set[int]) -> int:
    if not stat.S_ISDIR(st.st_mode):  # a directory has one name (its st_nlink counts its subdirectories)
        key = st.st_dev << 64 | st.st_ino  # one int: a tuple of two would take twice the memory
        if key in counted:  # looked up whatever st_nlink is now: the job may have removed the other names
            return NAME_BYTES
        if st.st_nlink > 1:  # only these: a set of every file would grow with every name
            counted.add(key)
    return max(st.st_blocks * 512, NAME_BYTES)
