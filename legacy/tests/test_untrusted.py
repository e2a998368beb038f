"""/api/v1 under hostile use, over real HTTP: users isolated from each other, paths that try to
leave the home, storage quota on every v1 write, bodies bounded before they are read, bad input
answered by the protocol's convention (never a 500), and the login throttle."""

import os
import socket

import httpx
import pytest

from jobs.models import Job, JobState
from quotas.models import Quota

from . import recorded as rec

A = "/pfs/local/home/alice"


@pytest.fixture
def alice_job(old_client, alice):
    c = old_client(alice)
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/jobs/secret-job/train.py"}, files={"file": ("t", b"")})
    c.replay(rec.SUBMIT, job="secret-job", package="pkg", dc="local")
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/private.txt"}, files={"file": ("p", b"alice only")})
    return Job.objects.get(name="secret-job")


def test_bob_cannot_see_kill_or_read_alices_jobs(old_client, alice_job, bob):
    b = old_client(bob)
    assert b.replay(rec.GET_JOBS).json()["items"] == []
    assert b.replay(rec.GET_PSERVERS).json()["items"] == []
    assert b.replay(rec.GET_WORKERS_NONE, job="secret-job").json()["items"] == []
    assert "no job named" in b.replay(rec.LOGS_REFUSED, job="secret-job").json()["msg"]
    assert "no job named" in b.replay(rec.KILL_REFUSED, job="secret-job").json()["msg"]
    b.replay(rec.Exchange("DELETE", "/api/v1/jobs/", rec.REFUSED, json={"jobname": "secret-job", "rm": True}))
    job = Job.objects.get(pk=alice_job.pk)
    assert job.state == JobState.QUEUED and not job.deleting


def test_bob_cannot_read_list_or_change_alices_files(old_client, alice_job, bob):
    b = old_client(bob)
    r = b.send("GET", "/api/v1/file/", params={"path": f"{A}/private.txt"})
    assert r.status_code == 403 and "own home" in r.json()["msg"]
    for exchange, subs in [(rec.STAT_MISSING, {"path": f"{A}/private.txt"}),
                           (rec.Exchange("GET", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                         params={"method": "ls", "r": "true", "arg": A}), {}),
                           (rec.Exchange("POST", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                         json={"method": "touch", "filesize": 5, "path": f"{A}/x"}), {}),
                           (rec.Exchange("DELETE", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                         json={"method": "rm", "r": True, "path": [A]}), {}),
                           (rec.Exchange("GET", "/api/v1/pfs/chunks", rec.PFS_REFUSED, params={
                               "method": "GetChunkMeta", "path": f"{A}/private.txt", "offset": 0,
                               "chunksize": 4096}), {})]:
        assert "own home" in b.replay(exchange, **subs).json()["err"]
    assert b.upload_chunk(f"{A}/private.txt", 0, b"bob was here", 4096).json()["err"]
    r = b.send("GET", "/api/v1/pfs/storage/chunks", params={"path": f"{A}/private.txt", "offset": 0,
                                                           "chunksize": 4096})
    assert r.status_code == 403
    listed = b.send("GET", "/api/v1/filelist/", params={"dc": "local", "path": A}).json()
    assert listed["items"] == [] and "own home" in listed["msg"]
    assert b.replay(rec.Exchange("POST", "/api/v1/publish/", {"code": 403, "msg": rec.NONEMPTY},
                                 json={"path": f"{A}/private.txt"}))
    assert (alice_job.user.username, open_home_file(alice_job, "private.txt")) == ("alice", b"alice only")


def test_bob_cannot_see_or_delete_alices_registries(old_client, alice, bob):
    old_client(alice).replay(rec.REGISTRY_ADD, reg="alices")
    b = old_client(bob)
    assert b.replay(rec.REGISTRY_GET).json()["msg"]["items"] == []
    assert "no registry named" in b.replay(rec.Exchange("DELETE", "/api/v1/registry/", rec.REFUSED,
                                                        json={"name": "pcloud-registry-alices"})).json()["msg"]
    b.send("POST", "/api/v1/file/", params={"path": "/pfs/local/home/bob/jobs/b/train.py"}, files={"file": ("t", b"")})
    r = b.send("POST", "/api/v1/jobs/", json={**rec.SUBMIT.json, "name": "b", "jobPackage": "p", "datacenter": "local",
                                             "registry": "alices", "pservers": 0})
    assert "you have no registry named" in r.json()["msg"]
    assert alice.registries.count() == 1


def open_home_file(job, name):
    from django.conf import settings

    return (settings.PFS_ROOT / "local/home/alice" / name).read_bytes()


@pytest.mark.parametrize("path", [
    f"{A}/../bob/x", f"{A}/a/../../bob", "/pfs/local/home/bob/x", "/etc/passwd", "../../etc/passwd",
    f"{A}/link-out/passwd", "/pfs/local/public/../home/bob", f"{A}/a\x00b",
])
def test_paths_that_leave_the_home_are_refused_everywhere(old_client, alice, settings, path):
    home = settings.PFS_ROOT / "local/home/alice"
    home.mkdir(parents=True)
    os.symlink("/etc", home / "link-out")
    c = old_client(alice)
    assert c.replay(rec.STAT_MISSING, path=path).json()["err"]
    assert c.replay(rec.Exchange("POST", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                 json={"method": "touch", "filesize": 3, "path": path})).json()["err"]
    assert c.replay(rec.Exchange("POST", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                 json={"method": "mkdir", "path": [path]})).json()["err"]
    assert c.upload_chunk(path, 0, b"abc", 4096).json()["err"]
    r = c.send("POST", "/api/v1/file/", params={"path": path}, files={"file": ("f", b"abc")})
    assert r.status_code == 200 and r.json()["msg"] and r.json()["code"] >= 400
    r = c.send("GET", "/api/v1/file/", params={"path": path})
    assert r.status_code in (400, 403, 404) and b"root:" not in r.content
    assert not (settings.PFS_ROOT / "local/home/bob").exists()


def test_v1_writes_count_against_the_storage_quota(old_client, alice, datacenter, settings):
    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=1 << 20)
    c = old_client(alice)
    too_big = c.replay(rec.Exchange("POST", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                    json={"method": "touch", "filesize": 2 << 20, "path": f"{A}/big"}))
    assert "quota exceeded" in too_big.json()["err"]
    r = c.send("POST", "/api/v1/file/", params={"path": f"{A}/f"}, files={"file": ("f", os.urandom(1_100_000))})
    assert r.json()["code"] == 413 and "quota exceeded" in r.json()["msg"]
    c.replay(rec.TOUCH, size=1 << 19, path=f"{A}/half")
    # a chunk written past the end grows the file: refused once that does not fit
    assert "quota exceeded" in c.upload_chunk(f"{A}/half", 1 << 20, os.urandom(4096), 4096).json()["err"]
    assert not (settings.PFS_ROOT / "local/home/alice/big").exists()
    assert (settings.PFS_ROOT / "local/home/alice/half").stat().st_size == 1 << 19


def test_bodies_are_bounded_before_they_are_read(live, alice, settings):
    anonymous = httpx.post(f"{live.url}/api/v1/file/?path={A}/x", content=b"x" * 1000)
    assert anonymous.status_code == 401
    c = httpx.Client(base_url=live.url)
    token = c.post("/api-token-auth/", json={"username": "alice", "password": "password"}).json()["token"]
    for path in ("/api/v1/file/", "/api/v1/pfs/storage/chunks", "/api/v1/jobs/", "/api/v1/pfs/files"):
        # only the head is sent: the answer comes before any of the declared body
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
                f"Content-Length: {settings.REQUEST_BODY_MAX + 1}\r\n\r\n")
        with socket.create_connection(("127.0.0.1", live.port), timeout=30) as s:
            s.sendall(head.encode())
            assert s.recv(65536).startswith(b"HTTP/1.1 413 "), path
    big = c.post("/api/v1/pfs/files", headers={"Authorization": f"Token {token}"},
                 json={"method": "mkdir", "path": [f"{A}/{'d' * 200}{i}" for i in range(20)]})
    assert "at most 2048 bytes" in big.json()["err"]


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/api/v1/jobs/", b"{not json"), ("POST", "/api/v1/jobs/", b"[1, 2]"), ("POST", "/api/v1/jobs/", b"{}"),
    ("POST", "/api/v1/jobs/", b'{"name": "x", "parallelism": "many", "pservers": -1, "cpu": []}'),
    ("POST", "/api/v1/jobs/", b'{"name": "x", "faulttolerant": true}'),
    ("DELETE", "/api/v1/jobs/", b'{"jobname": ["x"]}'), ("DELETE", "/api/v1/jobs/", b"[1]"),
    ("POST", "/api/v1/pfs/files", b'"touch"'), ("DELETE", "/api/v1/registry/", b"null"),
    ("DELETE", "/api/v1/jobs/", b"[" * 100 + b"]" * 100),
    ("GET", "/api/v1/logs?jobname=%00&n=x", b""),
    ("GET", "/api/v1/quota/?dc=%00", b""), ("POST", "/api/v1/registry/", b'{"name": "Bad Name!"}'),
    ("DELETE", "/api/v1/registry/", b'{"name": null}'), ("POST", "/api/v1/file/?path=/pfs/local/home/alice/x", b""),
    ("GET", "/api/v1/pfs/files?method=chmod", b""), ("GET", "/api/v1/pfs/files?method=stat", b""),
    ("POST", "/api/v1/pfs/files", b'{"method": "touch", "filesize": -1, "path": "/pfs/local/home/alice/t"}'),
    ("POST", "/api/v1/pfs/files", b'{"method": "touch", "filesize": 2e40, "path": "/pfs/local/home/alice/t"}'),
    ("POST", "/api/v1/pfs/files", b'{"method": "mkdir", "path": "/pfs/local/home/alice/notalist"}'),
    ("DELETE", "/api/v1/pfs/files", b'{"method": "rm", "path": ["/pfs/local/home/alice"]}'),
    ("GET", "/api/v1/pfs/chunks?method=GetChunkMeta&path=/pfs/local/home/alice/x&offset=-1&chunksize=1", b""),
    ("GET", "/api/v1/pfs/chunks?method=Other", b""), ("POST", "/api/v1/pfs/storage/chunks", b"no multipart"),
    ("POST", "/api/v1/publish/", b'{"path": 5}'), ("PUT", "/api/v1/jobs/", b"{}"), ("GET", "/api/v1/nothing", b""),
])
def test_bad_input_gets_the_protocols_refusal_never_a_500(old_client, alice, method, path, body):
    c = old_client(alice)
    r = c.send(method, path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    answer = r.json()
    refused = isinstance(answer.get("code"), int) and answer["code"] != 200 and answer["msg"]
    assert refused or answer.get("err"), answer


def test_no_token_is_401_and_a_revoked_one_too(old_client, alice):
    c = old_client()
    assert c.send("GET", "/api/v1/jobs/").status_code == 401
    c = old_client(alice)
    alice.api_tokens.get().auth_token.delete()
    assert c.send("GET", "/api/v1/jobs").status_code == 401


def test_legacy_tokens_expire_when_the_operator_says(old_client, alice, settings):
    settings.LEGACY_TOKEN_TTL_DAYS = 30
    old_client(alice)
    token = alice.api_tokens.get().auth_token
    days = (token.expiry - token.created).days
    assert days in (29, 30)


def test_wrong_passwords_are_throttled_like_every_login(old_client, alice, settings):
    settings.LOGIN_ACCOUNT_FREE_FAILURES = 100  # the address's limit alone (the account's: accounts/tests)
    c = old_client()
    answers = [c.login("alice", "wrong") for _ in range(settings.AXES_FAILURE_LIMIT + 1)]
    answers.append(c.login("alice", "password"))  # even the right password during the cool-down
    assert [r.status_code for r in answers] == [400] * (settings.AXES_FAILURE_LIMIT - 1) + [429] * 3
    for r in answers[-3:]:  # the failure that reached the limit too: the protocol's envelope, never a page
        assert r.headers["content-type"] == "application/json" and r.headers["retry-after"] == "900"
        assert r.json() == {"code": 429, "msg": "too many failed logins from your address; try again in 15 minutes"}
