"""What measuring a replica's disk costs the keeper (launcher/disk.py): it runs as root outside
the replica's cgroup, spared by the OOM killer, so its memory and time per measure must be bounded
by the replica's disk limit whatever the replica makes: millions of names cost it little disk
(empty files, hard links to one file) but each cost the keeper memory when listed or remembered."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from launcher import fdtree
from launcher.keeper_main import disk_usage
from tests.support import deep_chain

pytestmark = pytest.mark.timeout(120)

NAMES = 60_000  # enough to show what a listing costs (~4 MiB), quick to make
NAME_BYTES = 4096  # what each name costs the limit at least (launcher/disk.py)
LINKS_PER_FILE = 30_000  # ext4 allows 65,000 names per file


@contextmanager
def opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def many_names(top: Path, kind: str) -> Path:
    """`top` with NAMES names in it, as a job makes them: hard links to a few files, or empty files."""
    top.mkdir()
    with opened(top) as fd:
        for i in range(NAMES):
            if kind == "empty files" or i % LINKS_PER_FILE == 0:
                source = f"f{i}"
                os.close(os.open(source, os.O_CREAT | os.O_WRONLY, dir_fd=fd))
            else:
                os.link(source, f"l{i}", src_dir_fd=fd, dst_dir_fd=fd)
    return top


@pytest.fixture(scope="module", params=["hard links", "empty files"])
def crowded(request, tmp_path_factory) -> Path:
    return many_names(tmp_path_factory.mktemp("crowded") / "top", request.param)


def test_every_name_costs_the_limit_so_links_to_one_file_reach_it_too(crowded):
    with opened(crowded) as fd:
        assert disk_usage([fd]) >= NAMES * NAME_BYTES  # was a few files' worth for hard links


def test_a_measure_stops_at_the_limit_and_its_memory_is_bounded_by_it(crowded):
    limit = 4 << 20  # 1,024 names' worth: a measure reads about that many and no more
    with opened(crowded) as fd:
        held = len(os.listdir("/proc/self/fd"))
        tracemalloc.start()
        try:
            total = disk_usage([fd], limit)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(os.listdir("/proc/self/fd")) == held  # the walk left early, and closed what it held
    assert limit <= total < limit + 2 * NAME_BYTES
    # ~100-400 bytes per name read at most (a subdirectory's name to enter, a linked file's
    # identity), plus the interpreter's own; the whole listing of NAMES took ~4 MiB here.
    assert peak < limit // NAME_BYTES * 400 + (256 << 10), peak


def test_a_file_of_many_names_counts_its_blocks_once_and_each_further_name_as_a_name(tmp_path):
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    (work / "big").write_bytes(b"x" * (1 << 20))
    os.link(work / "big", work / "again")
    os.link(work / "big", tmp / "elsewhere")  # the replica's /tmp is measured with its working copy
    with opened(work) as w, opened(tmp) as t:
        alone = os.stat(work / "big").st_blocks * 512
        dirs = sum(max(os.stat(d).st_blocks * 512, NAME_BYTES) for d in (work, tmp))
        assert disk_usage([w, t]) == dirs + alone + 2 * NAME_BYTES


def test_a_measure_follows_no_link_and_reaches_the_bottom_of_a_very_deep_tree(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * (4 << 20))
    with deep_chain(tmp_path / "top", depth=fdtree.HELD * 3, leaf=b"y" * (1 << 20)) as top:
        os.symlink(outside, top / "d" / "link")
        with opened(top) as fd:
            names = [entry.name for _fd, entry in fdtree.entries(fd)]
            total = disk_usage([fd])
    assert names.count("d") == fdtree.HELD * 3 and "leaf" in names and "link" in names and "big" not in names
    assert (1 << 20) + fdtree.HELD * 3 * NAME_BYTES <= total < (4 << 20)  # the leaf counts, the link's target not
