"""Downloads (Range, If-Range, 416, directories as zip), share links, and a > 4 GiB sparse file
round trip over a real socket with stream hashing."""

import hashlib
import io
import os
import zipfile
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from pfs.models import ShareLink
from tests.support import DEEP, deep_chain

from .conftest import sha256_file, sha256_stream, write

A = "/pfs/local/home/alice"
DATA = bytes(range(256)) * 40  # 10240 bytes


@pytest.fixture
def blob(home_dir):
    return write(home_dir / "blob.bin", DATA)


def get(api, path=f"{A}/blob.bin", **headers):
    return api.get("/api/v2/files/content/", {"path": path}, **headers)


def body(resp):
    return b"".join(resp.streaming_content)


def test_full_download_headers(alice_api, blob):
    r = get(alice_api)
    assert r.status_code == 200 and body(r) == DATA
    assert r["Content-Length"] == str(len(DATA)) and r["Accept-Ranges"] == "bytes"
    assert r["ETag"] and r["Last-Modified"] and 'filename="blob.bin"' in r["Content-Disposition"]


@pytest.mark.parametrize("header,start,end", [
    ("bytes=0-99", 0, 99), ("bytes=100-", 100, 10239), ("bytes=-500", 9740, 10239),
    ("bytes=10000-99999", 10000, 10239), ("bytes=10239-10239", 10239, 10239), ("bytes=-99999", 0, 10239),
])
def test_single_ranges(alice_api, blob, header, start, end):
    r = get(alice_api, HTTP_RANGE=header)
    assert r.status_code == 206
    assert r["Content-Range"] == f"bytes {start}-{end}/{len(DATA)}"
    assert r["Content-Length"] == str(end - start + 1)
    assert body(r) == DATA[start:end + 1]


@pytest.mark.parametrize("header", ["bytes=10240-", "bytes=20000-30000", "bytes=-0"])
def test_unsatisfiable_ranges(alice_api, blob, header):
    r = get(alice_api, HTTP_RANGE=header)
    assert r.status_code == 416 and r["Content-Range"] == f"bytes */{len(DATA)}"


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "items=0-5", "bytes=5-2", "garbage"])
def test_ignored_ranges_send_everything(alice_api, blob, header):
    r = get(alice_api, HTTP_RANGE=header)
    assert r.status_code == 200 and body(r) == DATA


def test_if_range(alice_api, blob):
    tag = get(alice_api)["ETag"]
    r = get(alice_api, HTTP_RANGE="bytes=10-19", HTTP_IF_RANGE=tag)
    assert r.status_code == 206 and body(r) == DATA[10:20]
    r = get(alice_api, HTTP_RANGE="bytes=10-19", HTTP_IF_RANGE='"stale"')
    assert r.status_code == 200 and body(r) == DATA


def test_directory_downloads_as_zip(alice_api, home_dir):
    write(home_dir / "job" / "output" / "model.bin", b"m" * 5000)
    write(home_dir / "job" / "log.txt", b"done\n")
    (home_dir / "job" / "empty").mkdir()
    r = get(alice_api, f"{A}/job")
    assert r.status_code == 200 and r["Content-Type"] == "application/zip"
    data = body(r)
    assert int(r["Content-Length"]) == len(data)
    z = zipfile.ZipFile(io.BytesIO(data))
    assert z.testzip() is None
    assert z.read("output/model.bin") == b"m" * 5000 and z.read("log.txt") == b"done\n"
    assert "empty/" in z.namelist()


@pytest.mark.timeout(120)
def test_a_directory_holding_a_very_deep_tree_downloads_as_zip(alice_api, home_dir):
    write(home_dir / "job" / "log.txt", b"done\n")
    with deep_chain(home_dir / "job" / "deep", leaf=b"x"):
        r = get(alice_api, f"{A}/job")
        assert r.status_code == 200
        z = zipfile.ZipFile(io.BytesIO(body(r)))
    assert z.read("log.txt") == b"done\n" and z.read("deep/" + "d/" * DEEP + "leaf") == b"x"


def test_share_links(client, alice_api, home_dir, blob):
    r = alice_api.post("/api/v2/shares/", {"path": f"{A}/blob.bin"}, format="json")
    assert r.status_code == 201
    link = r.json()
    assert link["url"].endswith(f"/filepub/?uuid={link['uuid']}")
    r = client.get("/filepub/", {"uuid": link["uuid"]})  # anyone, no login
    assert r.status_code == 200 and body(r) == DATA
    r = client.get("/filepub/", {"uuid": link["uuid"]}, HTTP_RANGE="bytes=0-9")
    assert r.status_code == 206 and body(r) == DATA[:10]
    assert ShareLink.objects.get().downloads == 2
    assert alice_api.get("/api/v2/shares/").json()["count"] == 1
    assert alice_api.delete(f"/api/v2/shares/{link['uuid']}/").status_code == 204
    r = client.get("/filepub/", {"uuid": link["uuid"]})
    assert r.status_code == 404 and b"revoked" in r.content
    assert alice_api.get("/api/v2/shares/").json()["count"] == 0
    assert client.get("/filepub/", {"uuid": "not-a-uuid"}).status_code == 404


def test_share_expiry_and_limits(client, alice_api, home_dir, blob):
    link = alice_api.post("/api/v2/shares/", {"path": f"{A}/blob.bin", "expires_in": 3600}, format="json").json()
    assert client.get("/filepub/", {"uuid": link["uuid"]}).status_code == 200
    ShareLink.objects.update(expires=timezone.now() - timedelta(seconds=1))
    r = client.get("/filepub/", {"uuid": link["uuid"]})
    assert r.status_code == 410 and b"expired" in r.content
    assert alice_api.post("/api/v2/shares/", {"path": A}, format="json").status_code == 409  # directories: no
    # a file swapped for a link pointing out after sharing is not served
    os.unlink(home_dir / "blob.bin")
    os.symlink("/etc/passwd", home_dir / "blob.bin")
    link = ShareLink.objects.create(user=link and ShareLink.objects.get().user, path=f"{A}/blob.bin")
    assert client.get("/filepub/", {"uuid": str(link.uuid)}).status_code == 403


# --- a > 4 GiB sparse file over a real socket ---------------------------------------------------

GiB = 2**30
MARKS = [0, 4 * GiB - 3, 4 * GiB + 2 * 2**20]  # random bytes at the start, across 4 GiB, at the end


@pytest.fixture
def http(transactional_db, live_server, alice, home_dir):
    from accounts.services import issue_token

    s = requests.Session()
    s.headers["Authorization"] = f"Token {issue_token(alice)}"
    s.base = live_server.url
    return s


@pytest.mark.slow
def test_large_sparse_file_round_trip(http, home_dir, tmp_path):
    src = tmp_path / "sparse.bin"
    size = 4 * GiB + 3 * 2**20 + 7
    with open(src, "wb") as f:
        f.truncate(size)
        for mark in MARKS:
            f.seek(mark)
            f.write(os.urandom(2**20))
    assert os.stat(src).st_blocks * 512 < 64 * 2**20  # costs no disk
    digest = sha256_file(src)

    r = http.post(f"{http.base}/api/v2/uploads/", json={"path": f"{A}/big/sparse.bin", "size": size,
                                                        "sha256": digest})
    assert r.status_code == 201, r.text
    uid, chunk = r.json()["id"], 64 * 2**20
    with open(src, "rb") as f:
        for off in range(0, size, chunk):
            data = f.read(chunk)
            r = http.patch(f"{http.base}/api/v2/uploads/{uid}/", data=data,
                           headers={"Upload-Offset": str(off), "Content-Type": "application/offset+octet-stream"})
            assert r.status_code == 200, r.text
    assert r.json()["complete"]
    stored = home_dir / "big" / "sparse.bin"
    assert stored.stat().st_size == size
    assert stored.stat().st_blocks * 512 < 64 * 2**20  # zeros stayed holes on the server too

    with http.get(f"{http.base}/api/v2/files/content/", params={"path": f"{A}/big/sparse.bin"}, stream=True) as r:
        assert r.status_code == 200 and int(r.headers["Content-Length"]) == size
        got, n = sha256_stream(r.iter_content(4 * 2**20))
    assert (got, n) == (digest, size)

    # a range across the 4 GiB boundary
    start = 4 * GiB - 10
    r = http.get(f"{http.base}/api/v2/files/content/", params={"path": f"{A}/big/sparse.bin"},
                 headers={"Range": f"bytes={start}-{start + 99}"})
    assert r.status_code == 206 and r.headers["Content-Range"] == f"bytes {start}-{start + 99}/{size}"
    with open(src, "rb") as f:
        f.seek(start)
        assert hashlib.sha256(r.content).digest() == hashlib.sha256(f.read(100)).digest()
    assert http.get(f"{http.base}/api/v2/storage/usage/").json()["used_bytes"] == size
