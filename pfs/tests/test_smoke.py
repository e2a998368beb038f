from .conftest import write

A = "/pfs/local/home/alice"


def test_list_and_upload(alice_api, home_dir):
    write(home_dir / "a.txt", b"abc")
    r = alice_api.get("/api/v2/files/", {"path": A})
    assert r.status_code == 200, r.content
    assert [e["name"] for e in r.json()["results"]] == ["a.txt"]
    r = alice_api.put(f"/api/v2/files/content/?path={A}/b/c.txt", data=b"xyz", content_type="application/octet-stream")
    assert r.status_code == 201, r.content
    assert (home_dir / "b" / "c.txt").read_bytes() == b"xyz"
    r = alice_api.get("/api/v2/files/content/", {"path": f"{A}/b/c.txt"})
    assert r.status_code == 200
    assert b"".join(r.streaming_content) == b"xyz"
    r = alice_api.get("/api/v2/storage/usage/")
    assert r.json()["used_bytes"] == 6
