"""The /api/v2 storage endpoints, through real HTTP handling (Django's test client) and real files."""

import os

import pytest

from .conftest import write

A = "/pfs/local/home/alice"
B = "/pfs/local/home/bob"


def names(resp):
    return [e["name"] for e in resp.json()["results"]]


def test_requires_authentication(client, alice):
    assert client.get(f"/api/v2/files/?path={A}").status_code in (401, 403)
    assert client.post("/api/v2/uploads/", {"path": f"{A}/x", "size": 1}).status_code in (401, 403)


def test_list_paginates_and_sorts(alice_api, home_dir):
    for i in range(7):
        write(home_dir / f"f{i}.txt", b"x" * i)
    (home_dir / "zdir").mkdir()
    r = alice_api.get(f"/api/v2/files/?path={A}&limit=3")
    body = r.json()
    assert body["count"] == 8 and names(r) == ["zdir", "f0.txt", "f1.txt"] and body["next"]
    r = alice_api.get(f"/api/v2/files/?path={A}&limit=3&offset=6")
    assert names(r) == ["f5.txt", "f6.txt"]
    e = r.json()["results"][1]
    assert e == {"name": "f6.txt", "path": f"{A}/f6.txt", "type": "file", "size": 6, "mtime": e["mtime"]}


def test_list_defaults_to_home(alice_api, home_dir):
    write(home_dir / "a", b"1")
    assert names(alice_api.get("/api/v2/files/")) == ["a"]


def test_stat_mkdir_move_copy_remove(alice_api, home_dir):
    r = alice_api.post("/api/v2/files/mkdir/", {"path": f"{A}/a/b/c"}, format="json")
    assert r.status_code == 201 and r.json()["type"] == "dir"
    assert alice_api.post("/api/v2/files/mkdir/", {"path": f"{A}/a/b/c"}, format="json").status_code == 201
    write(home_dir / "a" / "b" / "c" / "f.txt", b"data")
    assert alice_api.get(f"/api/v2/files/stat/?path={A}/a/b/c/f.txt").json()["size"] == 4
    assert alice_api.get(f"/api/v2/files/stat/?path={A}/nope").status_code == 404
    # mkdir over a file
    assert alice_api.post("/api/v2/files/mkdir/", {"path": f"{A}/a/b/c/f.txt/x"}, format="json").status_code == 409

    r = alice_api.post("/api/v2/files/move/", {"src": f"{A}/a/b/c/f.txt", "dst": f"{A}/g.txt"}, format="json")
    assert r.status_code == 200 and r.json()["path"] == f"{A}/g.txt"
    assert (home_dir / "g.txt").read_bytes() == b"data" and not (home_dir / "a/b/c/f.txt").exists()
    # into an existing directory, like mv
    r = alice_api.post("/api/v2/files/move/", {"src": f"{A}/g.txt", "dst": f"{A}/a"}, format="json")
    assert r.json()["path"] == f"{A}/a/g.txt"
    write(home_dir / "h.txt", b"other")
    r = alice_api.post("/api/v2/files/move/", {"src": f"{A}/h.txt", "dst": f"{A}/a/g.txt"}, format="json")
    assert r.status_code == 409 and "overwrite" in r.json()["detail"]
    r = alice_api.post("/api/v2/files/move/", {"src": f"{A}/a", "dst": f"{A}/a/b/inside"}, format="json")
    assert r.status_code == 409

    r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/a", "dst": f"{A}/a2"}, format="json")
    assert r.status_code == 201
    assert (home_dir / "a2" / "g.txt").read_bytes() == b"data" and (home_dir / "a2" / "b" / "c").is_dir()
    r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/h.txt", "dst": f"{A}/a/g.txt", "overwrite": True},
                       format="json")
    assert r.status_code == 201 and (home_dir / "a" / "g.txt").read_bytes() == b"other"

    r = alice_api.delete(f"/api/v2/files/?path={A}/a2")
    assert r.status_code == 409 and "recursive" in r.json()["detail"]
    assert alice_api.delete(f"/api/v2/files/?path={A}/a2&recursive=true").status_code == 204
    assert not (home_dir / "a2").exists()
    assert alice_api.delete(f"/api/v2/files/?path={A}/h.txt").status_code == 204
    assert alice_api.delete(f"/api/v2/files/?path={A}/h.txt").status_code == 404
    assert alice_api.delete(f"/api/v2/files/?path={A}&recursive=true").status_code == 403


def test_usage_follows_every_change(alice_api, home_dir):
    def used():
        return alice_api.get("/api/v2/storage/usage/").json()["used_bytes"]

    assert used() == 0
    alice_api.put(f"/api/v2/files/content/?path={A}/a.bin", data=b"x" * 1000, content_type="application/octet-stream")
    assert used() == 1000
    alice_api.put(f"/api/v2/files/content/?path={A}/a.bin", data=b"x" * 400, content_type="application/octet-stream")
    assert used() == 400
    alice_api.post("/api/v2/files/copy/", {"src": f"{A}/a.bin", "dst": f"{A}/d/b.bin"}, format="json")
    assert used() == 800
    alice_api.post("/api/v2/files/move/", {"src": f"{A}/d/b.bin", "dst": f"{A}/c.bin"}, format="json")
    assert used() == 800
    alice_api.delete(f"/api/v2/files/?path={A}/d&recursive=true")
    alice_api.delete(f"/api/v2/files/?path={A}/c.bin")
    assert used() == 400
    # what a job writes directly is counted by the periodic recompute
    write(home_dir / "job-output" / "model.bin", b"m" * 600)
    from pfs.tasks import housekeeping

    housekeeping()
    assert used() == 1000
    body = alice_api.get("/api/v2/storage/usage/").json()
    assert body["limit_bytes"] == 100 * 2**30 and body["free_bytes"] == body["limit_bytes"] - 1000


def test_put_needs_length_and_checks_it(alice_api, home_dir):
    r = alice_api.generic("PUT", f"/api/v2/files/content/?path={A}/x", b"abc",
                          content_type="application/octet-stream", CONTENT_LENGTH="")
    assert r.status_code == 411
    r = alice_api.generic("PUT", f"/api/v2/files/content/?path={A}/empty", b"",
                          content_type="application/octet-stream", CONTENT_LENGTH="0")
    assert r.status_code == 201 and (home_dir / "empty").read_bytes() == b""
    (home_dir / "dir").mkdir()
    r = alice_api.put(f"/api/v2/files/content/?path={A}/dir", data=b"x", content_type="application/octet-stream")
    assert r.status_code == 409


def test_overwrite_false_refuses(alice_api, home_dir):
    write(home_dir / "x", b"1")
    r = alice_api.put(f"/api/v2/files/content/?path={A}/x&overwrite=false", data=b"2",
                      content_type="application/octet-stream")
    assert r.status_code == 409 and (home_dir / "x").read_bytes() == b"1"


@pytest.fixture
def alice_upload(alice_api, home_dir):
    r = alice_api.post("/api/v2/uploads/", {"path": f"{A}/up.bin", "size": 10}, format="json")
    assert r.status_code == 201
    return r.json()["id"]


def test_other_users_cannot_touch_an_upload(bob_api, alice_upload, home_dir):
    url = f"/api/v2/uploads/{alice_upload}/"
    assert bob_api.get(url).status_code == 404
    assert bob_api.head(url).status_code == 404
    r = bob_api.generic("PATCH", url, b"0123456789", content_type="application/offset+octet-stream",
                        HTTP_UPLOAD_OFFSET="0")
    assert r.status_code == 404
    assert bob_api.delete(url).status_code == 404
    assert bob_api.get("/api/v2/uploads/").json()["count"] == 0
    assert not (home_dir / "up.bin").exists()


def test_other_users_cannot_revoke_or_list_shares(alice_api, bob_api, home_dir):
    write(home_dir / "s.txt", b"shared")
    link = alice_api.post("/api/v2/shares/", {"path": f"{A}/s.txt"}, format="json").json()
    assert bob_api.get("/api/v2/shares/").json()["count"] == 0
    assert bob_api.delete(f"/api/v2/shares/{link['uuid']}/").status_code == 404
    assert bob_api.post("/api/v2/shares/", {"path": f"{A}/s.txt"}, format="json").status_code == 403


def test_bob_sees_only_his_home(bob_api, alice_api, home_dir):
    write(home_dir / "private.txt", b"alice")
    for url in (f"/api/v2/files/?path={A}", f"/api/v2/files/stat/?path={A}/private.txt",
                f"/api/v2/files/content/?path={A}/private.txt"):
        assert bob_api.get(url).status_code == 403
    r = bob_api.post("/api/v2/files/copy/", {"src": f"{A}/private.txt", "dst": f"{B}/stolen.txt"}, format="json")
    assert r.status_code == 403
    assert names(bob_api.get("/api/v2/files/")) == []


def test_mkdir_for_a_user_whose_home_does_not_exist_yet(bob_api, settings):
    assert not (settings.PFS_ROOT / "local" / "home" / "bob").exists()
    r = bob_api.post("/api/v2/files/mkdir/", {"path": f"{B}/jobs/fit"}, format="json")
    assert r.status_code == 201, r.content
    assert (settings.PFS_ROOT / "local" / "home" / "bob" / "jobs" / "fit").is_dir()


def test_a_copied_tree_keeps_files_modes_and_empty_dirs_and_skips_links(alice_api, home_dir):
    big = os.urandom(3 * 2**20 + 11)
    write(home_dir / "t" / "deep" / "er" / "big.bin", big)
    (home_dir / "t" / "empty").mkdir()
    write(home_dir / "t" / "run.sh", b"#!/bin/sh\n")
    os.chmod(home_dir / "t" / "run.sh", 0o750)
    os.symlink("run.sh", home_dir / "t" / "link")
    os.symlink("deep", home_dir / "t" / "dirlink")
    r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/t", "dst": f"{A}/u"}, format="json")
    assert r.status_code == 201, r.json()
    u = home_dir / "u"
    assert (u / "deep" / "er" / "big.bin").read_bytes() == big
    assert (u / "empty").is_dir() and not any((u / "empty").iterdir())
    assert os.stat(u / "run.sh").st_mode & 0o777 == 0o750
    assert sorted(p.name for p in u.iterdir()) == ["deep", "empty", "run.sh"]
    assert not [n for n in os.listdir(home_dir) if "copying" in n]
    assert alice_api.get("/api/v2/storage/usage/").json()["used_bytes"] == 2 * (len(big) + 10)
