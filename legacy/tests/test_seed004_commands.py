"""Every seed-004 paddlectl command, replayed as the compiled client sends it (recorded.py),
against the real server: submit of a local package, get jobs|workers|quota|registry, logs,
kill [-rm], registry, delete registry, file, cp both ways (chunked, md5), ls, mkdir, rm.
The v1 chunk upload's own cases (streamed, odd bodies) are in test_chunk_upload.py."""

import hashlib
import os
from urllib.parse import quote

import pytest

from accounts.models import Registry
from jobs.live import logstore
from jobs.models import Job, JobState

from . import recorded as rec

A = "/pfs/local/home/alice"
MiB = 1 << 20
CHUNK = 4 * MiB


def test_login_gives_a_token_that_never_expires(old_client, alice):
    c = old_client()
    r = c.login("alice")
    assert r.status_code == 200 and set(r.json()) == {"token"}
    assert alice.api_tokens.get().auth_token.expiry is None
    c.replay(rec.GET_QUOTA)


def test_submit_of_a_local_package_then_get_logs_and_kill(old_client, alice):
    c = old_client(alice)
    # the client puts each package file below jobs/<job>/, then posts the job
    for relpath, text in {"train.py": "print('hi')\n", "conf/settings.py": "x = 1\n"}.items():
        r = c.send("POST", "/api/v1/file/", params={"path": rec.SUBMIT_FILE_PATH.format(
            dc="local", user="alice", job="my-job", relpath=relpath)}, files={"file": (relpath, text.encode())})
        assert r.status_code == 200 and r.json() == rec.OK, r.text
    c.replay(rec.SUBMIT, job="my-job", package="./my_package", dc="local")

    job = Job.objects.get(user=alice, name="my-job")
    assert (job.package, job.trainers, job.pservers, job.mode, job.state) == (
        f"{A}/jobs/my-job", 2, 1, "ps", JobState.QUEUED)
    jobs = c.replay(rec.GET_JOBS).json()
    assert [i["metadata"]["name"] for i in jobs["items"]] == ["my-job-trainer"]
    assert jobs["items"][0]["spec"]["parallelism"] == 2
    pservers = c.replay(rec.GET_PSERVERS).json()
    assert [(i["metadata"]["name"], i["status"]["replicas"]) for i in pservers["items"]] == [("my-job-pserver", 1)]
    workers = c.replay(rec.GET_WORKERS, job="my-job").json()["items"]
    assert sorted(w["metadata"]["name"] for w in workers) == [
        "my-job-pserver-0", "my-job-trainer-0", "my-job-trainer-1"]

    trainer = job.replicas.get(role="trainer", index=0)
    logstore.append(trainer, b"".join(b"line %d\n" % i for i in range(30)))
    text = c.replay(rec.LOGS, job="my-job").json()["msg"]
    assert "====my-job-trainer-0====\n" + "".join(f"line {i}\n" for i in range(20, 30)) in text
    assert "====my-job-pserver-0====\n" in text and "====my-job-trainer-1====\n" in text
    one = c.replay(rec.Exchange("GET", "/api/v1/logs", {"code": 200, "msg": str},
                                params={"jobname": "my-job", "n": "2", "w": "my-job-trainer-0"})).json()["msg"]
    assert one == "====my-job-trainer-0====\nline 28\nline 29\n"

    # The original server deleted the job's objects at kill, whatever their state: so here.
    c.replay(rec.KILL, job="my-job")
    gone = Job.objects.get(pk=job.pk)
    assert (gone.state, gone.deleting) == (JobState.KILLED, True)  # stopped, then removed in the background
    assert c.replay(rec.GET_JOBS).json()["items"] == []
    assert c.replay(rec.GET_WORKERS_NONE, job="my-job").json()["items"] == []


def test_workers_of_a_job_not_started_yet_each_carry_a_waiting_container(old_client, alice):
    """The client reads container_statuses[0] of every pod: while the job is queued, building or
    starting, each worker has one, waiting, with the job's state as the reason."""
    c = old_client(alice)
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/jobs/waits/train.py"}, files={"file": ("t", b"")})
    c.replay(rec.SUBMIT, job="waits", package="./waits", dc="local")
    for state in (JobState.QUEUED, JobState.BUILDING, JobState.STARTING):
        Job.objects.filter(name="waits").update(state=state)
        workers = c.replay(rec.GET_WORKERS, job="waits").json()["items"]
        assert len(workers) == 3
        for w in workers:
            status = w["status"]
            assert status["phase"] == "Pending" and status["start_time"] is None
            assert status["container_statuses"][0]["state"]["waiting"]["reason"] == state
            assert status["container_statuses"][0]["state"]["terminated"] is None


def test_workers_of_an_unknown_job_are_an_empty_pod_list(old_client, alice):
    c = old_client(alice)
    for name in ("no-such-job", "", "bad\x00name"):
        assert c.replay(rec.GET_WORKERS_NONE, job=name).json()["items"] == []


def test_kill_of_an_ended_job_removes_it_from_get_jobs(old_client, alice):
    """The client never sends -rm: a kill of a job that has ended removes it, as the original
    server did."""
    c = old_client(alice)
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/jobs/done/train.py"}, files={"file": ("t", b"")})
    c.replay(rec.SUBMIT, job="done", package="./done", dc="local")
    Job.objects.filter(name="done").update(state=JobState.SUCCEEDED)
    c.replay(rec.KILL, job="done")
    assert c.replay(rec.GET_JOBS).json()["items"] == []
    assert c.replay(rec.GET_WORKERS_NONE, job="done").json()["items"] == []
    assert Job.objects.get(name="done").deleting  # its files and logs go in the background
    assert "no job named" in c.replay(rec.KILL_REFUSED, job="done").json()["msg"]


def test_seed003_spelling_and_a_package_already_in_pfs(old_client, alice):
    c = old_client(alice)
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/pkgs/p1/train.py"}, files={"file": ("train.py", b"")})
    c.replay(rec.SUBMIT_SEED003, job="seed-job", package=f"{A}/pkgs/p1", dc="local")
    job = Job.objects.get(user=alice, name="seed-job")
    assert (job.package, job.mode, job.trainers) == (f"{A}/pkgs/p1", "collective", 1)


def test_the_clients_unset_flags_take_the_servers_defaults(old_client, alice):
    c = old_client(alice)
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/jobs/defaults/train.py"}, files={"file": ("t", b"")})
    body = {**rec.SUBMIT.json, "name": "defaults", "jobPackage": "./pkg", "datacenter": "local", "pservers": 0,
            "pscpu": 0, "psmemory": "", "passes": 0}
    assert c.send("POST", "/api/v1/jobs/", json=body).json() == rec.OK
    job = Job.objects.get(name="defaults")
    assert (job.mode, job.passes, job.pscpu) == ("collective", 1, "1")


def test_a_refused_submission_says_why_in_msg(old_client, alice):
    c = old_client(alice)
    msg = c.replay(rec.SUBMIT_REFUSED, job="no-package", package=f"{A}/missing", dc="local").json()["msg"]
    assert "package" in msg and "not a directory" in msg
    msg = c.replay(rec.SUBMIT_REFUSED, job="x", package=f"{A}/missing", dc="elsewhere").json()["msg"]
    assert "no datacenter named 'elsewhere'" in msg
    assert not Job.objects.exists()


def test_registry_add_get_delete_and_submit_with_it(old_client, alice):
    c = old_client(alice)
    c.replay(rec.REGISTRY_ADD, reg="mine")
    listed = c.replay(rec.REGISTRY_GET).json()
    assert [i["metadata"]["name"] for i in listed["msg"]["items"]] == ["pcloud-registry-mine"]
    assert "s3cret" not in str(listed)
    assert Registry.objects.get(user=alice).password == "s3cret"  # stored (encrypted) for image pulls
    again = c.replay(rec.Exchange("POST", "/api/v1/registry/", rec.REFUSED, json=rec.REGISTRY_ADD.json), reg="mine")
    assert "already have a registry" in again.json()["msg"]

    c.send("POST", "/api/v1/file/", params={"path": f"{A}/jobs/reg-job/train.py"}, files={"file": ("t", b"")})
    body = {**rec.SUBMIT.json, "registry": "mine", "pservers": 0, "image": "registry.example.com/train:1"}
    r = c.send("POST", "/api/v1/jobs/", json={**body, "name": "reg-job", "jobPackage": "pkg", "datacenter": "local"})
    assert r.json() == rec.OK, r.text
    assert Job.objects.get(name="reg-job").registry.name == "pcloud-registry-mine"

    c.replay(rec.REGISTRY_DELETE, reg="mine")
    assert c.replay(rec.REGISTRY_GET).json()["msg"]["items"] == []
    c.replay(rec.Exchange("DELETE", "/api/v1/registry/", rec.REFUSED, json={"name": "pcloud-registry-mine"}))


def test_get_quota_mirrors_the_users_quota(old_client, alice):
    hard = old_client(alice).replay(rec.GET_QUOTA).json()["items"][0]["status"]["hard"]
    assert (hard["requests.cpu"], hard["requests.memory"], hard["alpha.kubernetes.io/nvidia-gpu"]) == ("8", "32Gi", "0")


def test_file_upload_list_download_and_publish(old_client, alice):
    c = old_client(alice)
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/data/a.txt"}, files={"file": ("a.txt", b"alpha\n")})
    assert c.replay(rec.FILE_LIST, dc="local", path=f"{A}/data").json()["items"] == ["a.txt"]
    assert c.replay(rec.FILE_LIST, dc="local", path="data").json()["items"] == ["a.txt"]  # relative to the home
    r = c.send("GET", "/api/v1/file/", params={"path": f"{A}/data/a.txt"})
    assert (r.status_code, r.content) == (200, b"alpha\n")

    url = c.replay(rec.PUBLISH, path=f"{A}/data/a.txt").json()["url"]
    assert "/filepub/?uuid=" in url
    assert c.replay(rec.PUBLISH_GET).json() == {"files": [f"{A}/data/a.txt"], "urls": [url]}
    assert c.http.get(url).content == b"alpha\n"  # anyone holding the link


def cp_up(c, data: bytes, dest: str) -> int:
    """The client's upload: stat, touch to the size, then each chunk whose md5 differs; the
    number of chunks sent."""
    assert c.send("GET", "/api/v1/pfs/files", params={"method": "stat", "path": dest}).status_code == 200
    assert c.replay(rec.TOUCH, size=len(data), path=dest).json()["results"]["Size"] == len(data)
    sent = 0
    for offset in range(0, len(data), CHUNK):
        piece = data[offset:offset + CHUNK]
        meta = c.replay(rec.CHUNK_META, path=dest, offset=offset, chunksize=CHUNK).json()["results"]
        assert meta["offset"] == offset and meta["len"] == len(piece)
        if meta["checksum"] != hashlib.md5(piece).hexdigest():
            r = c.upload_chunk(dest, offset, piece, CHUNK)
            assert r.status_code == 200 and r.json()["err"] == "", r.text
            sent += 1
    return sent


def test_cp_up_and_down_in_md5_checked_chunks_resumes(old_client, alice, tmp_path):
    c = old_client(alice)
    data = os.urandom(2 * CHUNK + 12345)
    dest = f"{A}/big/data.bin"
    on_disk = tmp_path / "pfs/local/home/alice/big/data.bin"
    assert "no such file or directory" in c.replay(rec.STAT_MISSING, path=dest).json()["err"]
    c.replay(rec.TOUCH, size=len(data), path=dest)
    assert on_disk.stat().st_blocks * 512 < CHUNK  # sparse: the size costs no disk until written

    assert cp_up(c, data, dest) == 3
    assert on_disk.read_bytes() == data
    assert cp_up(c, data, dest) == 0  # a re-run finds every md5 equal
    with open(on_disk, "r+b") as f:  # an interrupted write left the middle chunk wrong
        f.seek(CHUNK + 10)
        f.write(b"\0" * 100)
    assert cp_up(c, data, dest) == 1
    assert on_disk.read_bytes() == data

    # download: stat the source, then fetch each chunk
    assert c.replay(rec.STAT, path=dest).json()["results"]["Size"] == len(data)
    got = b""
    for offset in range(0, len(data), CHUNK):
        filename, piece = c.download_chunk(dest, offset, CHUNK)
        assert filename == f"chunksize={CHUNK}&offset={offset}&path=%2Fpfs%2Flocal%2Fhome%2Falice%2Fbig%2Fdata.bin"
        got += piece
    assert got == data


def test_ls_mkdir_rm(old_client, alice):
    c = old_client(alice)
    c.replay(rec.MKDIR, path=f"{A}/d1/sub")
    for name in ("part-0.gz", "part-1.gz", "other.txt"):
        c.send("POST", "/api/v1/file/", params={"path": f"{A}/d1/{name}"}, files={"file": (name, b"xy")})
    listed = c.replay(rec.LS, r="false", path=f"{A}/d1").json()["results"]
    assert [(e["Path"], e["IsDir"]) for e in listed] == [
        (f"{A}/d1/sub", True), (f"{A}/d1/other.txt", False), (f"{A}/d1/part-0.gz", False), (f"{A}/d1/part-1.gz", False)]
    globbed = c.replay(rec.LS, r="false", path=f"{A}/d1/part-*.gz").json()["results"]
    assert [(e["Path"], e["Size"]) for e in globbed] == [(f"{A}/d1/part-0.gz", 2), (f"{A}/d1/part-1.gz", 2)]
    assert globbed[0]["ModTime"] > 1_000_000_000 * 10**9  # unix nanoseconds
    recursive = c.replay(rec.LS, r="true", path=f"{A}").json()["results"]
    assert {e["Path"] for e in recursive} >= {f"{A}/d1", f"{A}/d1/sub", f"{A}/d1/part-0.gz"}

    c.replay(rec.RM, path=f"{A}/d1")
    assert "no such file or directory" in c.replay(rec.STAT_MISSING, path=f"{A}/d1").json()["err"]
    missing = c.replay(rec.Exchange("GET", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                    params={"method": "ls", "r": "false", "arg": f"{A}/nothing*"}))
    assert "no such file or directory" in missing.json()["err"]


def cp_down(c, src: str) -> bytes:
    """The client's download: stat the source, then for each chunk its GetChunkMeta and a GET of
    `len` bytes (what remains, for the last one), parameters in the client's order."""
    size = c.replay(rec.STAT, path=src).json()["results"]["Size"]
    got = bytearray(size)  # the client pre-sizes the local file
    for offset in range(0, size, CHUNK):
        meta = c.replay(rec.CHUNK_META, path=src, offset=offset, chunksize=CHUNK).json()["results"]
        filename, piece = c.download_chunk(src, offset, meta["len"])
        assert filename == f"chunksize={meta['len']}&offset={offset}&path={quote(src, safe='')}"
        assert hashlib.md5(piece).hexdigest() == meta["checksum"]
        got[offset:offset + len(piece)] = piece
    return bytes(got)


@pytest.mark.parametrize("size", [1, 2, 4095, CHUNK + 3])
def test_cp_down_of_a_short_last_chunk(old_client, alice, size):
    c = old_client(alice)
    data = b"\x01" + os.urandom(size - 1)  # never all zeros: touch's zeros would match it, and no chunk go
    dest = f"{A}/short/a.txt"
    c.replay(rec.TOUCH, size=size, path=dest)
    assert cp_up(c, data, dest) == -(-size // CHUNK)
    assert cp_down(c, dest) == data


def test_rm_globs_each_path_as_ls_does(old_client, alice, settings):
    c = old_client(alice)
    for name in ("a.txt", "b.txt", "keep.csv"):
        c.send("POST", "/api/v1/file/", params={"path": f"{A}/ft2/{name}"}, files={"file": (name, b"x")})
    removed = c.replay(rec.RM_FILES, path=f"{A}/ft2/*.txt").json()["results"]
    assert sorted(r["Path"] for r in removed) == [f"{A}/ft2/a.txt", f"{A}/ft2/b.txt"]
    assert sorted(p.name for p in (settings.PFS_ROOT / "local/home/alice/ft2").iterdir()) == ["keep.csv"]
    missing = c.replay(rec.Exchange("DELETE", "/api/v1/pfs/files", rec.PFS_REFUSED,
                                    json={"method": "rm", "r": False, "path": [f"{A}/ft2/*.txt"]}))
    assert "no such file or directory" in missing.json()["err"]


def test_cp_into_a_missing_directory_makes_no_file_named_like_it(old_client, alice, settings):
    """`cp f /pfs/.../newdir/`: the client stats the destination (missing), then touches it."""
    c = old_client(alice)
    c.replay(rec.MKDIR, path=f"{A}/d")
    c.replay(rec.STAT_MISSING, path=f"{A}/d/newdir/")
    assert "ends in '/'" in c.replay(rec.TOUCH_REFUSED, size=5, path=f"{A}/d/newdir/").json()["err"]
    assert list((settings.PFS_ROOT / "local/home/alice/d").iterdir()) == []


def test_a_new_files_chunks_read_as_zeros_until_written(old_client, alice, monkeypatch):
    """GetChunkMeta of a file `touch` just made (all hole) is the md5 of zeros, the last chunk's
    of its own length, found without reading the file; once written, of its bytes."""
    from pfs import chunks

    c = old_client(alice)
    dest = f"{A}/holes.bin"
    c.replay(rec.TOUCH, size=CHUNK + 100, path=dest)
    with monkeypatch.context() as m:  # the server runs in this process
        m.setattr(chunks, "FileSpan", None)
        metas = [c.replay(rec.CHUNK_META, path=dest, offset=o, chunksize=CHUNK).json()["results"]
                 for o in (0, CHUNK)]
    assert [(m["len"], m["checksum"]) for m in metas] == [
        (CHUNK, hashlib.md5(bytes(CHUNK)).hexdigest()), (100, hashlib.md5(bytes(100)).hexdigest())]
    piece = os.urandom(100)
    assert c.upload_chunk(dest, CHUNK, piece, 100).json()["err"] == ""
    meta = c.replay(rec.CHUNK_META, path=dest, offset=CHUNK, chunksize=CHUNK).json()["results"]
    assert meta["checksum"] == hashlib.md5(piece).hexdigest()
