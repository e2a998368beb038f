"""launcher.fdtree: walks and removals of trees a job shapes, by descriptor, however deep."""

from __future__ import annotations

import os

import pytest

from launcher import fdtree
from launcher.keeper_main import disk_usage
from tests.support import DEEP, deep_chain

pytestmark = pytest.mark.timeout(120)


def _open(path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_a_walk_reaches_the_bottom_of_a_very_deep_tree_holding_few_descriptors(tmp_path):
    with deep_chain(tmp_path / "top", leaf=b"x" * 10) as top:
        fd = _open(top)
        try:
            held = []
            seen = [(len(path), files) for path, _fd, _dirs, files in fdtree.walk(fd)
                    if not held.append(len(os.listdir("/proc/self/fd")))]
            assert seen[-1] == (DEEP, ["leaf"]) and len(seen) == DEEP + 1
            assert max(held) - min(held) <= fdtree.HELD + 2
            assert disk_usage([fd]) >= (DEEP + 1) * 4096  # the keeper's disk limit sees all of it too
        finally:
            os.close(fd)


def test_a_walk_that_climbs_back_to_a_moved_directory_stops(tmp_path):
    with deep_chain(tmp_path / "top", depth=fdtree.HELD + 10) as top:
        fd = _open(top)
        try:
            with pytest.raises(fdtree.Moved):  # rather than go on from wherever ".." now leads
                for path, _fd, _dirs, _files in fdtree.walk(fd):
                    if len(path) == fdtree.HELD + 5:  # the descriptors of levels 1 to 5 are closed by now
                        os.rename(top.joinpath(*["d"] * 6), top / "moved")  # level 6, out of level 5
        finally:
            os.close(fd)


def test_removing_a_very_deep_tree_follows_no_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"k")
    with deep_chain(tmp_path / "top", leaf=b"x") as top:
        os.symlink(outside, top / "d" / "link")
        fdtree.rmtree(top)
        assert not top.exists()
    assert (outside / "keep").read_bytes() == b"k"
