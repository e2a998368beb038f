"""Storage commands (cp, ls, mkdir, rm, mv, file) and resumable transfers, against the live
server's /api/v2 storage endpoints."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import google_crc32c
import httpx
import pytest

from paddlectl import pfs

from .conftest import put_files, run_cli
from .proxy import CuttableProxy

pytestmark = pytest.mark.django_db(transaction=True)
HOME = "/pfs/local/home/alice"


def disk(settings, rel: str = ""):
    return settings.PFS_ROOT / "local" / "home" / "alice" / rel


@pytest.fixture
def small_chunks(monkeypatch):
    """Make the resumable path kick in for small test files."""
    monkeypatch.setattr(pfs, "SMALL_FILE", 64 << 10)
    monkeypatch.setattr(pfs, "CHUNK", 128 << 10)
    monkeypatch.setattr(pfs, "WIRE_CHUNK", 256 << 10)


def test_mkdir_ls_mv_rm(config, settings):
    assert run_cli("mkdir", f"{HOME}/a/b").code == 0
    put_files_res = run_cli("ls")
    assert put_files_res.code == 0 and "a/" in put_files_res.out
    assert run_cli("ls", "-o", "name", f"{HOME}/a").lines == ["b"]
    assert run_cli("mv", f"{HOME}/a/b", f"{HOME}/c").code == 0
    assert disk(settings, "c").is_dir()
    res = run_cli("rm", f"{HOME}/a")
    assert res.code == 1 and "recursive" in res.err
    assert run_cli("rm", "-r", f"{HOME}/a").code == 0
    assert run_cli("rm", f"{HOME}/missing").code == 1
    (disk(settings, "c") / "f.txt").write_text("x")
    res = run_cli("rm", f"{HOME}/c")
    assert res.code == 1 and "recursive" in res.err
    assert run_cli("rm", "-r", f"{HOME}/c").code == 0
    assert not disk(settings, "c").exists()
    res = run_cli("ls", "/pfs/local/home/bob")
    assert res.code == 1 and "own home" in res.err
    assert run_cli("ls", "relative/path").code == 2


def test_cp_up_and_down_files_and_trees(config, settings, tmp_path, small_chunks):
    src = tmp_path / "data"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    big = os.urandom(300_000)
    (src / "sub" / "big.bin").write_bytes(big)
    res = run_cli("cp", "-r", str(src), f"{HOME}/")
    assert res.code == 0, res.err
    assert disk(settings, "data/a.txt").read_text() == "alpha\n"
    assert disk(settings, "data/sub/big.bin").read_bytes() == big
    assert run_cli("cp", str(src), f"{HOME}/x").code == 2  # a directory without -r
    res = run_cli("cp", str(src / "a.txt"), f"{HOME}/renamed.txt")
    assert res.code == 0 and disk(settings, "renamed.txt").read_text() == "alpha\n"
    out = tmp_path / "out"
    assert run_cli("cp", "-r", f"{HOME}/data", str(out)).code == 0
    assert (out / "sub" / "big.bin").read_bytes() == big
    assert run_cli("cp", f"{HOME}/renamed.txt", str(tmp_path / "r.txt")).code == 0
    assert (tmp_path / "r.txt").read_text() == "alpha\n"
    assert run_cli("cp", f"{HOME}/renamed.txt", f"{HOME}/copy.txt").code == 0  # server-side copy
    assert disk(settings, "copy.txt").read_text() == "alpha\n"
    assert run_cli("cp", str(src), str(tmp_path / "y")).code == 2


def test_seed_003_example_upload_and_download(config, alice, settings, tmp_path, monkeypatch):
    job = tmp_path / "job_word_emb"
    for part in ("train", "test"):
        (job / "data" / part).mkdir(parents=True)
        for i in range(2):
            (job / "data" / part / f"{part}.txt-{i:05d}").write_text(f"{part} {i}\n")
    monkeypatch.chdir(tmp_path)
    # like cp -r: a new destination receives the directory's contents
    assert run_cli("pfs", "cp", "-r", "./job_word_emb/data", f"{HOME}/job_word_emb").code == 0
    assert disk(settings, "job_word_emb/test/test.txt-00001").read_text() == "test 1\n"
    # into an existing directory it goes as a subdirectory
    assert run_cli("cp", "-r", "./job_word_emb/data", f"{HOME}/job_word_emb").code == 0
    assert disk(settings, "job_word_emb/data/train/train.txt-00000").read_text() == "train 0\n"
    put_files(alice, {"job_word_emb/output/model.bin": b"weights"})
    # seed 003 downloads the output directory without -r
    assert run_cli("pfs", "cp", f"{HOME}/job_word_emb/output", "./output").code == 0
    assert (tmp_path / "output" / "model.bin").read_bytes() == b"weights"
    assert run_cli("cp", "-r", f"{HOME}/job_word_emb/output", "./again").code == 0
    assert (tmp_path / "again" / "model.bin").read_bytes() == b"weights"


def test_file_command_follows_seed_004_rules(config, settings, tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "ds" / "inner").mkdir(parents=True)
    (work / "ds" / "one.txt").write_text("1")
    (work / "ds" / "inner" / "two.txt").write_text("2")
    monkeypatch.chdir(work)
    assert run_cli("file", "ds", f"{HOME}/up").code == 0  # the directory itself goes inside dest
    assert disk(settings, "up/ds/inner/two.txt").read_text() == "2"
    assert run_cli("file", "ds/", f"{HOME}/flat").code == 0  # only what is inside src
    assert disk(settings, "flat/one.txt").read_text() == "1" and not disk(settings, "flat/ds").exists()
    for bad in ("../work/ds", str(work / "ds"), "ds/../../x"):
        res = run_cli("file", bad, f"{HOME}/up")
        assert res.code == 2, bad
    res = run_cli("file", "ds", "/pfs/local/public/x")
    assert res.code == 2 and "your home" in res.err
    assert run_cli("file", "nothing", f"{HOME}/up").code == 1


def test_upload_resumes_after_a_dropped_connection(live_server, alice, settings, tmp_path, small_chunks):
    from accounts.services import issue_token
    from paddlectl import Client

    data = os.urandom(1_000_000)
    (tmp_path / "big.bin").write_bytes(data)
    proxy = CuttableProxy(live_server.url)
    proxy.cut_up_at = 450_000  # drop everything once ~45% has been sent
    with Client(proxy.url, token=issue_token(alice), username="alice") as client:
        seen = []
        client.storage.upload_file(tmp_path / "big.bin", f"{HOME}/big.bin", progress=lambda d, t: seen.append(d))
    proxy.close()
    assert disk(settings, "big.bin").read_bytes() == data
    assert proxy.cuts == 1
    assert proxy.bytes_up < 1.5 * len(data)  # resumed, not started over
    assert seen[-1] == len(data)


def test_the_web_server_splices_uploads_straight_to_disk(alice, settings, tmp_path, small_chunks, zero_copy_calls):
    """Against the server as the Procfile runs it, paddlectl's chunks (no per-chunk checksum)
    go socket -> file inside the kernel; the file's CRC-32C is still checked at the end. They go
    by sendfile, in chunks of WIRE_CHUNK (fewer round trips than httpx's CHUNK)."""
    from tests.support import LiveASGI

    from accounts.services import issue_token
    from paddlectl import Client

    data = os.urandom(300_000)  # a chunk of 256 KiB, then a short one
    (tmp_path / "big.bin").write_bytes(data)
    with LiveASGI() as live, Client(live.url, token=issue_token(alice), username="alice") as client:
        seen = []
        client.storage.upload_file(tmp_path / "big.bin", f"{HOME}/big.bin", progress=lambda d, t: seen.append(d))
    assert disk(settings, "big.bin").read_bytes() == data
    assert zero_copy_calls == [("splice", 256 << 10), ("splice", 300_000 - (256 << 10))]
    assert seen == sorted(seen) and seen[-1] == len(data)


def _upload_that_gives_up(live_server, token, local, remote, monkeypatch) -> CuttableProxy:
    """Run an upload through a proxy that goes down for good halfway; the proxy, back up."""
    from paddlectl import Client
    from paddlectl.errors import ConnectionFailed

    proxy = CuttableProxy(live_server.url)
    proxy.cut_up_at = 300_000
    real_cut = proxy.cut
    monkeypatch.setattr(proxy, "cut", lambda refuse_for=0.0, count=True: real_cut(3600.0, count))  # stays down
    with monkeypatch.context() as m:
        m.setattr(pfs, "RETRY_FOR", 0.0)  # gives up at once
        with Client(proxy.url, token=token, username="alice") as client, pytest.raises(ConnectionFailed):
            client.storage.upload_file(local, remote)
    proxy.refuse_until = 0.0  # the same server back (records are per endpoint)
    return proxy


def test_upload_continues_an_unfinished_upload_from_an_earlier_run(alice, settings, tmp_path, small_chunks,
                                                                   live_server, monkeypatch):
    """A run that gave up leaves its upload on the server and a record of it (~/.paddle/uploads):
    the next run of the same copy sends only the rest; the CRC-32C, computed while sending, is
    checked by the server at the end."""
    from accounts.services import issue_token
    from paddlectl import Client
    from pfs.models import UploadSession

    data = os.urandom(600_000)
    (tmp_path / "big.bin").write_bytes(data)
    token = issue_token(alice)
    proxy = _upload_that_gives_up(live_server, token, tmp_path / "big.bin", f"{HOME}/resumed.bin", monkeypatch)
    (upload,) = UploadSession.objects.filter(completed=None)
    assert upload.digest_algorithm == "crc32c" and upload.digest_later
    assert list((tmp_path / "home" / ".paddle" / "uploads").glob("*.json"))
    before = proxy.bytes_up
    with Client(proxy.url, token=token, username="alice") as client:
        client.storage.upload_file(tmp_path / "big.bin", f"{HOME}/resumed.bin")
    proxy.close()
    assert disk(settings, "resumed.bin").read_bytes() == data
    assert proxy.bytes_up - before < 500_000  # only the missing part (plus heads) was sent
    upload.refresh_from_db()
    assert upload.completed and upload.digest == f"{google_crc32c.value(data):08x}"
    assert not list((tmp_path / "home" / ".paddle" / "uploads").glob("*.json"))  # done: forgotten


def test_a_file_changed_between_runs_is_not_spliced_onto_its_old_start(alice, settings, tmp_path, small_chunks,
                                                                       live_server, monkeypatch):
    """Changed with a new modification time: a new upload. Changed keeping size and time: the
    rest is sent, the server finds the CRC-32C wrong and discards the upload; the copy fails."""
    from accounts.services import issue_token
    from paddlectl import Client
    from paddlectl.errors import PaddlectlError
    from pfs.models import UploadSession

    local, token = tmp_path / "big.bin", issue_token(alice)
    local.write_bytes(os.urandom(600_000))
    proxy = _upload_that_gives_up(live_server, token, local, f"{HOME}/f.bin", monkeypatch)
    st = local.stat()
    local.write_bytes(new := os.urandom(600_000))
    os.utime(local, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    before = proxy.bytes_up
    with Client(proxy.url, token=token, username="alice") as client:
        client.storage.upload_file(local, f"{HOME}/f.bin")
    assert disk(settings, "f.bin").read_bytes() == new and proxy.bytes_up - before > 600_000
    assert not UploadSession.objects.filter(completed=None).exists()  # the old one cancelled
    proxy.close()

    local.write_bytes(os.urandom(600_000))
    proxy = _upload_that_gives_up(live_server, token, local, f"{HOME}/g.bin", monkeypatch)
    st = local.stat()
    with open(local, "r+b") as f:  # same size, same time
        f.write(b"changed")
    os.utime(local, ns=(st.st_atime_ns, st.st_mtime_ns))
    with Client(proxy.url, token=token, username="alice") as client, pytest.raises(PaddlectlError) as e:
        client.storage.upload_file(local, f"{HOME}/g.bin")
    proxy.close()
    assert "changed while it was being uploaded" in str(e.value)
    assert not disk(settings, "g.bin").exists() and not UploadSession.objects.filter(path=f"{HOME}/g.bin").exists()


def test_download_resumes_after_a_dropped_connection_and_across_runs(live_server, alice, settings, tmp_path):
    from accounts.services import issue_token
    from paddlectl import Client

    data = os.urandom(3_000_000)
    put_files(alice, {"model.bin": data})
    token = issue_token(alice)
    proxy = CuttableProxy(live_server.url)
    proxy.cut_down_at = 1_200_000
    with Client(proxy.url, token=token, username="alice") as client:
        client.storage.download_file(f"{HOME}/model.bin", tmp_path / "model.bin")
    assert (tmp_path / "model.bin").read_bytes() == data
    assert proxy.cuts == 1 and proxy.bytes_down < 1.5 * len(data)
    assert not (tmp_path / "model.bin.part").exists()
    # an earlier run left half the file: only the rest is fetched
    etag = httpx.head(f"{live_server.url}/api/v2/files/content/", params={"path": f"{HOME}/model.bin"},
                      headers={"Authorization": f"Token {token}"}).headers.get("ETag")
    if etag is None:
        etag = httpx.get(f"{live_server.url}/api/v2/files/content/", params={"path": f"{HOME}/model.bin"},
                         headers={"Authorization": f"Token {token}", "Range": "bytes=0-0"}).headers["ETag"]
    (tmp_path / "again.bin.part").write_bytes(data[:2_000_000])
    (tmp_path / "again.bin.part.json").write_text(json.dumps({"path": f"{HOME}/model.bin", "etag": etag}))
    before = proxy.bytes_down
    with Client(proxy.url, token=token, username="alice") as client:
        client.storage.download_file(f"{HOME}/model.bin", tmp_path / "again.bin")
    proxy.close()
    assert (tmp_path / "again.bin").read_bytes() == data
    assert proxy.bytes_down - before < 1_100_000


@pytest.mark.parametrize(("unknown", "later"), [(("crc32c_later",), True), (("crc32c_later", "sha256_later"), False)])
def test_an_older_server_gets_the_sha256_later_or_up_front(alice, settings, tmp_path, small_chunks, live_server,
                                                           monkeypatch, unknown, later):
    """A server from before `crc32c_later` ignores the field and does not echo it: the client
    cancels that upload and asks for `sha256_later`; one from before that too gets the sha256
    given at creation, as clients did."""
    from accounts.services import issue_token
    from paddlectl import Client
    from pfs.api import serializers
    from pfs.models import UploadSession

    for field in unknown:
        monkeypatch.delitem(serializers.UploadCreateSerializer._declared_fields, field)
        monkeypatch.delitem(serializers.UploadSerializer._declared_fields, field)
    monkeypatch.setattr(serializers.UploadSerializer.Meta, "fields",
                        [f for f in serializers.UploadSerializer.Meta.fields if f not in unknown])
    data = os.urandom(300_000)
    (tmp_path / "big.bin").write_bytes(data)
    with Client(live_server.url, token=issue_token(alice), username="alice") as client:
        client.storage.upload_file(tmp_path / "big.bin", f"{HOME}/old.bin")
    assert disk(settings, "old.bin").read_bytes() == data
    (upload,) = UploadSession.objects.all()  # the ones it did not check were cancelled
    assert upload.digest_algorithm == "sha256" and upload.digest_later == later and upload.completed
    assert upload.digest == hashlib.sha256(data).hexdigest()


def test_an_upload_an_older_client_began_by_sha256_is_finished_by_sha256(alice, settings, tmp_path, small_chunks,
                                                                        live_server, monkeypatch):
    """The record of an unfinished upload may name one promised a sha256 (by a paddlectl before
    crc32c, or one without google-crc32c's compiled code): the rest goes with that digest."""
    from accounts.services import issue_token
    from paddlectl import Client, pfs_upload
    from pfs.models import UploadSession

    data = os.urandom(600_000)
    (tmp_path / "big.bin").write_bytes(data)
    token = issue_token(alice)
    with monkeypatch.context() as m:
        m.setattr(pfs_upload, "preferred_algorithm", lambda: "sha256")
        proxy = _upload_that_gives_up(live_server, token, tmp_path / "big.bin", f"{HOME}/old.bin", monkeypatch)
    (upload,) = UploadSession.objects.filter(completed=None)
    assert upload.digest_algorithm == "sha256"
    with Client(proxy.url, token=token, username="alice") as client:
        client.storage.upload_file(tmp_path / "big.bin", f"{HOME}/old.bin")
    proxy.close()
    upload.refresh_from_db()
    assert disk(settings, "old.bin").read_bytes() == data
    assert upload.completed and upload.digest == hashlib.sha256(data).hexdigest()


def test_paddlectl_checks_by_crc32c_only_with_its_compiled_code(monkeypatch):
    """google-crc32c's pure-Python fallback is far slower than hashlib's sha256: without the
    compiled code (or without the package), sha256."""
    import google_crc32c

    from paddlectl import pfs_upload

    assert pfs_upload.preferred_algorithm() == ("crc32c" if google_crc32c.implementation == "c" else "sha256")
    monkeypatch.setattr(google_crc32c, "implementation", "python")
    assert pfs_upload.preferred_algorithm() == "sha256"
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # as if not installed: the import fails
    assert pfs_upload.preferred_algorithm() == "sha256"
