"""Copying or moving a directory into itself, as a link inside the home can make it look
otherwise, is refused with a 409, and a tree copy never runs into its own destination."""

import os
import resource

import pytest

from pfs import services, storage
from tests.support import deep_chain

from .conftest import write

A = "/pfs/local/home/alice"


@pytest.fixture
def linked_to_a(home_dir):
    """alice's home as a job may leave it: a directory and a relative link to it (a link that
    stays inside the home, so it is followed)."""
    write(home_dir / "a" / "f", b"data")
    (home_dir / "a" / "sub").mkdir()
    os.symlink("a", home_dir / "lnk")
    return home_dir


@pytest.fixture
def few_descriptors():
    """Few free file descriptors, so a copy that runs into itself again ends within ~100 levels
    (a server would go on until no request in the process could open a file)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 300, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _copying_dirs(top):
    return [d for _root, dirs, _files in os.walk(top) for d in dirs if d.startswith(".copying-")]


@pytest.mark.parametrize("dst", ["lnk/b", "lnk/sub", "lnk/sub/new/deeper"])
def test_copying_a_directory_into_itself_through_a_link_is_refused(alice_api, linked_to_a, few_descriptors, dst):
    alice_api.raise_request_exception = False
    r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/a", "dst": f"{A}/{dst}"}, format="json")
    assert r.status_code == 409, (r.status_code, r.content[:200])
    assert "inside itself" in r.json()["detail"]
    assert sorted(os.listdir(linked_to_a / "a")) == ["f", "sub"] and not os.listdir(linked_to_a / "a" / "sub")


def test_copying_a_link_to_a_directory_into_that_directory_is_refused(alice_api, linked_to_a, few_descriptors):
    alice_api.raise_request_exception = False
    r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/lnk", "dst": f"{A}/a/b"}, format="json")
    assert r.status_code == 409 and "inside itself" in r.json()["detail"], (r.status_code, r.content[:200])
    assert _copying_dirs(linked_to_a / "a") == []


def test_moving_a_directory_into_itself_through_a_link_is_refused(alice_api, linked_to_a):
    alice_api.raise_request_exception = False
    r = alice_api.post("/api/v2/files/move/", {"src": f"{A}/a", "dst": f"{A}/lnk/b"}, format="json")
    assert r.status_code == 409 and "inside itself" in r.json()["detail"], (r.status_code, r.content[:200])
    assert (linked_to_a / "a" / "f").read_bytes() == b"data"
    # moving the link itself into the directory it points at is fine: it is a link, not the tree
    r = alice_api.post("/api/v2/files/move/", {"src": f"{A}/lnk", "dst": f"{A}/a/lnk"}, format="json")
    assert r.status_code == 200, r.content
    assert os.readlink(linked_to_a / "a" / "lnk") == "a"


def test_a_move_made_into_itself_after_the_check_is_a_409(alice_api, linked_to_a, monkeypatch):
    """A job can move directories between the check and the rename; the kernel then refuses it."""
    monkeypatch.setattr(services, "lies_inside", lambda *args: False)
    alice_api.raise_request_exception = False
    r = alice_api.post("/api/v2/files/move/", {"src": f"{A}/a", "dst": f"{A}/lnk/b"}, format="json")
    assert r.status_code == 409 and "inside itself" in r.json()["detail"], (r.status_code, r.content[:200])
    assert (linked_to_a / "a" / "f").read_bytes() == b"data"


def test_a_tree_copy_never_copies_into_its_own_destination(linked_to_a, few_descriptors):
    """Should the destination end up inside the source after the checks (a job moving
    directories), the copy still ends: it leaves its own directories out."""
    (linked_to_a / "a" / "sub" / ".copying-x").mkdir()
    src = os.open(linked_to_a / "a", storage.DIRECTORY)
    dst = os.open(linked_to_a / "a" / "sub" / ".copying-x", storage.DIRECTORY)
    try:
        assert storage.copy_tree(src, dst, lambda n: None) == 4
    finally:
        os.close(src)
        os.close(dst)
    copied = linked_to_a / "a" / "sub" / ".copying-x"
    assert sorted(os.listdir(copied)) == ["f", "sub"] and os.listdir(copied / "sub") == []


def test_copying_a_tree_deeper_than_the_copy_goes_is_refused_and_leaves_nothing(alice_api, home_dir,
                                                                                few_descriptors):
    """A copy holds descriptors per level and a job nests directories without end: past
    MAX_COPY_DEPTH levels the copy stops with a 400, rather than take the descriptors every other
    request in the process needs."""
    assert storage.MAX_COPY_DEPTH == 64  # as docs/operating/storage.md says
    alice_api.raise_request_exception = False
    with deep_chain(home_dir / "deep", depth=storage.MAX_COPY_DEPTH + 1):
        r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/deep", "dst": f"{A}/copy"}, format="json")
        assert r.status_code == 400 and "levels deep" in r.json()["detail"], (r.status_code, r.content[:200])
        assert [name for name in os.listdir(home_dir) if not name.startswith(".")] == ["deep"]
    with deep_chain(home_dir / "deep", depth=storage.MAX_COPY_DEPTH, leaf=b"x"):
        r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/deep", "dst": f"{A}/copy"}, format="json")
        assert r.status_code == 201, r.content[:200]
        assert (home_dir / "copy" / "/".join(["d"] * storage.MAX_COPY_DEPTH) / "leaf").read_bytes() == b"x"
