"""Seed 004 spells a home `/pfs/{datacenter}/user/{username}`: it is the same home as
`/pfs/{datacenter}/home/{username}`, with the same isolation."""

import pytest

from pfs import paths
from pfs.paths import PathError

from .conftest import write

pytestmark = pytest.mark.django_db


def test_user_form_resolves_to_the_same_home(alice, home_dir):
    seed = paths.resolve(alice, "/pfs/local/user/alice/data/x.txt")
    usual = paths.resolve(alice, "/pfs/local/home/alice/data/x.txt")
    assert seed == usual
    assert seed.virtual == "/pfs/local/home/alice/data/x.txt"
    assert paths.resolve(alice, "/pfs/local/user/alice").disk == home_dir


def test_user_form_of_another_users_home_is_refused(alice, bob, home_dir):
    with pytest.raises(PathError) as err:
        paths.resolve(alice, "/pfs/local/user/bob/secret.txt")
    assert err.value.status == 403 and "your own home" in str(err.value)


def test_user_form_keeps_the_traversal_checks_and_uploads_is_an_ordinary_name(alice, home_dir):
    assert paths.resolve(alice, "/pfs/local/user/alice/.uploads/x", write=True).parts == (".uploads", "x")
    with pytest.raises(PathError):
        paths.resolve(alice, "/pfs/local/user/alice/../bob/x")


def test_files_api_lists_and_writes_through_the_user_form(alice_api, home_dir):
    write(home_dir / "in" / "a.txt", b"1")
    r = alice_api.get("/api/v2/files/?path=/pfs/local/user/alice/in")
    assert r.status_code == 200, r.content
    assert [e["path"] for e in r.json()["results"]] == ["/pfs/local/home/alice/in/a.txt"]
    r = alice_api.post("/api/v2/files/mkdir/", {"path": "/pfs/local/user/alice/out"}, format="json")
    assert r.status_code in (200, 201), r.content
    assert (home_dir / "out").is_dir()
