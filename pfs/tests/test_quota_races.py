"""The storage quota holds under concurrency: ten parallel 3 MiB writes against a 10 MiB quota,
through each write path of the real server (uvicorn with the production ASGI stack, real
database, real disk), never store more than 10 MiB; archives stop at the quota as they are
unpacked; a one-shot upload too big for the free quota is refused before its body is sent."""

import io
import os
import re
import socket
import tarfile
import threading
import zipfile
from urllib.parse import urlparse

import pytest
import requests
from django.conf import settings

from pfs import packages, usage
from pfs.models import StorageReservation, UploadSession
from pfs.paths import home
from tests.support import LiveASGI

from .conftest import scratch

A = "/pfs/local/home/alice"
MiB = 2**20
QUOTA = 10 * MiB
SIZE = 3 * MiB
OCTETS = "application/octet-stream"


@pytest.fixture
def limited(transactional_db, alice, datacenter, home_dir):
    """alice with a 10 MiB storage quota (and room for any number of jobs)."""
    from quotas.models import Quota

    return Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=QUOTA, max_running_jobs=100,
                                cpu_millicores=10**9, memory_bytes=2**60)


@pytest.fixture
def server(limited):
    with LiveASGI() as live:
        yield live.url


@pytest.fixture
def token(alice):
    from accounts.services import issue_token

    return f"Token {issue_token(alice)}"


def stored(home_dir) -> int:
    """Bytes of regular files in the home on disk."""
    total = 0
    for root, _dirs, files in os.walk(home_dir):
        total += sum(os.lstat(os.path.join(root, f)).st_size for f in files)
    return total


def in_parallel(fn, n=10) -> list:
    """Run fn(0..n-1) in n threads started together; their results (or exceptions) in order."""
    results: list = [None] * n
    start = threading.Barrier(n)

    def run(i):
        try:
            start.wait(30)
            results[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - reported by the caller's assertions
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    return results


def put(base, token, i):
    r = requests.put(f"{base}/api/v2/files/content/", params={"path": f"{A}/put-{i}.bin"}, data=os.urandom(SIZE),
                     headers={"Authorization": token, "Content-Type": OCTETS}, timeout=120)
    return r.status_code, r.text


def resumable(base, token, i):
    s = requests.Session()
    s.headers["Authorization"] = token
    r = s.post(f"{base}/api/v2/uploads/", json={"path": f"{A}/up-{i}.bin", "size": SIZE}, timeout=120)
    if r.status_code != 201:
        return r.status_code, r.text
    uid = r.json()["id"]
    for offset in range(0, SIZE, MiB):  # bytes of an unfinished upload stay reserved until it completes
        r = s.patch(f"{base}/api/v2/uploads/{uid}/", data=os.urandom(MiB), timeout=120,
                    headers={"Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream"})
    return (201 if r.status_code == 200 and r.json()["complete"] else r.status_code), r.text


def copy(base, token, i):
    r = requests.post(f"{base}/api/v2/files/copy/", json={"src": "/pfs/local/public/src.bin",
                                                          "dst": f"{A}/copy-{i}.bin"},
                      headers={"Authorization": token}, timeout=120)
    return r.status_code, r.text


_one_login_at_a_time = threading.Lock()


def logged_in(base) -> requests.Session:
    """A session of alice's. The logins go one after another (the login gate answers a burst of
    one account's password checks with 429: accounts/login_gate.py); the writes race."""
    s = requests.Session()
    s.get(f"{base}/login/", timeout=60)
    with _one_login_at_a_time:
        r = s.post(f"{base}/login/", data={"username": "alice", "password": "password",
                                           "csrfmiddlewaretoken": s.cookies["csrftoken"]}, timeout=60)
    assert r.status_code == 200 and r.url.endswith("/jobs/"), r.url
    return s


JOB_FORM = {"datacenter": "local", "mode": "ps", "source": "upload", "entry": "python train.py", "trainers": 1,
            "pservers": 1, "cpu": "1", "memory": "1Gi", "gpu": 0, "pscpu": "1", "psmemory": "1Gi", "passes": 1,
            "env": "", "image": "", "registry": "", "package": ""}


def zipped(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def package(base, token, i):
    s = logged_in(base)
    data = zipped({"train.py": b"print(1)\n", "data.bin": os.urandom(SIZE - 9)})
    form = {**JOB_FORM, "name": f"job-{i}", "csrfmiddlewaretoken": s.cookies["csrftoken"]}
    r = s.post(f"{base}/jobs/new/", data=form,
               files={"files": ("pkg.zip", data, "application/zip")}, timeout=120, allow_redirects=False)
    if r.status_code == 302:
        return 201, ""
    found = re.search(r"quota exceeded: used [^<]*", r.text)
    return (413 if found else r.status_code), found.group(0) if found else r.text[-2000:]


WRITERS = {"one-shot PUT": put, "resumable upload": resumable, "copy": copy, "job form package": package}


@pytest.mark.parametrize("path", WRITERS)
def test_ten_parallel_3_mib_writes_never_store_more_than_a_10_mib_quota(server, token, alice, home_dir, public_dir,
                                                                     path):
    (public_dir / "src.bin").write_bytes(os.urandom(SIZE))  # public: copying it counts, it does not
    results = in_parallel(lambda i: WRITERS[path](server, token, i))
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors
    codes = sorted(code for code, _ in results)
    assert codes == [201] * 3 + [413] * 7, results
    assert all(text.startswith("quota exceeded: used") or "quota exceeded: used" in text
               for code, text in results if code == 413), results
    assert stored(home_dir) <= QUOTA
    # the books agree with the disk, and no reservation or scratch file outlives its write
    assert usage.get_usage(alice, "local").used_bytes == stored(home_dir)
    assert not StorageReservation.objects.filter(upload=None).exists()
    assert not StorageReservation.objects.exclude(upload__completed=None).exists()
    leftovers = [n for n in os.listdir(scratch(home_dir)) if n != ".lock"]
    assert leftovers == [f"{s.pk}.part" for s in UploadSession.objects.filter(completed=None)]


def test_a_zip_bomb_in_the_job_form_is_refused_before_its_bytes_are_written(limited, alice, home_dir):
    from django.core.exceptions import ValidationError

    from jobs.services import submit_with_upload

    bomb = zipped({f"zeros-{i}.bin": bytes(91 * MiB) for i in range(3)})  # 273 MiB in about 270 KB
    assert len(bomb) < 400_000
    f = CountingUpload("pkg.zip", bomb)
    with pytest.raises(ValidationError) as e:
        submit_with_upload(alice, {**JOB_FORM, "name": "bomb"}, [f])
    assert "quota exceeded: used" in str(e.value.message_dict["files"])
    assert f.read_bytes < len(bomb) // 4  # the central directory's sizes were enough to refuse
    assert stored(home_dir) == 0 and os.listdir(scratch(home_dir)) in ([], [".lock"])
    assert usage.get_usage(alice, "local").reserved_bytes == 0


def test_a_tar_bomb_is_unpacked_only_up_to_the_quota(limited, alice, home_dir):
    from django.core.exceptions import ValidationError

    from jobs.services import submit_with_upload

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:  # a tar says each size only as it gets there
        for i in range(3):
            info = tarfile.TarInfo(f"zeros-{i}.bin")
            info.size = 91 * MiB
            tar.addfile(info, io.BytesIO(bytes(info.size)))
    bomb = buf.getvalue()
    f = CountingUpload("pkg.tar.gz", bomb)
    with pytest.raises(ValidationError) as e:
        submit_with_upload(alice, {**JOB_FORM, "name": "bomb"}, [f])
    assert "quota exceeded: used" in str(e.value.message_dict["files"])
    assert f.read_bytes < len(bomb) // 4  # it stopped near 10 of 273 MiB, not at the end
    assert stored(home_dir) == 0 and os.listdir(scratch(home_dir)) in ([], [".lock"])
    assert usage.get_usage(alice, "local").reserved_bytes == 0


class CountingUpload(io.BytesIO):
    """An uploaded file (as Django hands it to the form) that counts the bytes read from it."""

    def __init__(self, name: str, data: bytes):
        super().__init__(data)
        self.name, self.size, self.read_bytes = name, len(data), 0

    def read(self, n=-1):
        out = super().read(n)
        self.read_bytes += len(out)
        return out

    def chunks(self, chunk_size=65536):
        self.seek(0)
        while block := self.read(chunk_size):
            yield block


def head_only(base: str, head: str) -> bytes:
    """Send a request head and no body; what the server answers within 20 s."""
    u = urlparse(base)
    with socket.create_connection((u.hostname, u.port), timeout=20) as s:
        s.sendall(head.encode())
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and b"quota exceeded" in answer:
                    break
        except TimeoutError:
            pass
    return answer


def put_head(path: str, length: int, **headers) -> str:
    lines = [f"PUT /api/v2/files/content/?path={path} HTTP/1.1", "Host: 127.0.0.1",
             f"Content-Type: {OCTETS}", f"Content-Length: {length}", *[f"{k}: {v}" for k, v in headers.items()]]
    return "\r\n".join(lines) + "\r\n\r\n"


def test_a_put_declaring_more_than_the_free_quota_is_refused_before_its_body(server, token, alice, client, settings):
    requests.put(f"{server}/api/v2/files/content/", params={"path": f"{A}/have.bin"}, data=b"x" * (4 * MiB),
                 headers={"Authorization": token, "Content-Type": OCTETS}, timeout=60).raise_for_status()
    answer = head_only(server, put_head(f"{A}/big.bin", 7 * MiB, Authorization=token))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b'"quota exceeded: used 4.0 MiB of 10.0 MiB"' in answer or b"quota exceeded: used 4" in answer, answer
    # a browser session too
    client.force_login(alice)
    name = settings.SESSION_COOKIE_NAME
    cookie = f"{name}={client.cookies[name].value}"
    answer = head_only(server, put_head(f"{A}/big.bin", 7 * MiB, Cookie=cookie))
    assert answer.startswith(b"HTTP/1.1 413") and b"quota exceeded: used" in answer, answer[:300]
    # replacing a file needs room only for the difference; what fits waits for its body
    r = requests.put(f"{server}/api/v2/files/content/", params={"path": f"{A}/have.bin"}, data=b"y" * (10 * MiB),
                     headers={"Authorization": token, "Content-Type": OCTETS}, timeout=60)
    assert r.status_code == 201, r.text
    assert not (home(alice, "local").disk / "big.bin").exists()


def test_staged_package_bytes_count_until_settled(limited, alice, home_dir):
    """A package being staged holds its bytes: a parallel write sees them as reserved."""
    dest = home(alice, "local").child("jobs", "pkg")
    seen = []

    class Probe:
        name = "train.py"

        def chunks(self):
            yield b"x" * (6 * MiB)
            seen.append(usage.get_usage(alice, "local"))
            yield b"y"

    packages.save_package(dest, [Probe()])
    assert seen[0].reserved_bytes == 6 * MiB and seen[0].used_bytes == 0
    after = usage.get_usage(alice, "local")
    assert (after.used_bytes, after.reserved_bytes) == (6 * MiB + 1, 0)


def test_an_unfinished_upload_keeps_its_whole_size_reserved(limited, alice, home_dir):
    from pfs import uploads

    first = uploads.create(alice, f"{A}/a.bin", SIZE)
    uploads.write_chunk(first, 0, io.BytesIO(os.urandom(2 * MiB)).read, 2 * MiB)  # 1 MiB still to come
    uploads.create(alice, f"{A}/b.bin", SIZE)
    uploads.create(alice, f"{A}/c.bin", SIZE)
    with pytest.raises(usage.QuotaExceeded) as e:
        uploads.create(alice, f"{A}/d.bin", SIZE)
    assert e.value.message == "quota exceeded: used 9.0 MiB of 10.0 MiB"
    assert usage.get_usage(alice, "local").reserved_bytes == 3 * SIZE


def test_housekeeping_drops_reservations_whose_writer_died(alice, datacenter, home_dir):
    from datetime import timedelta

    from django.utils import timezone

    from pfs.tasks import housekeeping

    dead = StorageReservation.objects.create(user=alice, datacenter=datacenter, bytes=5 * MiB)
    StorageReservation.objects.filter(pk=dead.pk).update(updated=timezone.now() - settings.PFS_RESERVATION_TTL
                                                         - timedelta(seconds=1))
    alive = usage.reserve(home(alice, "local").child("x.bin"), 2 * MiB)
    assert usage.get_usage(alice, "local").reserved_bytes == 7 * MiB
    assert housekeeping()["reservations_dropped"] == 1
    assert usage.get_usage(alice, "local").reserved_bytes == 2 * MiB
    alive.release()
    assert usage.get_usage(alice, "local").reserved_bytes == 0
