"""Every hostile path is refused on every endpoint, with a 4xx saying why, and nothing outside
the caller's own home (or public, read-only) is read or touched."""

import errno
import io
import json
import os
import threading
import zipfile
from urllib.parse import quote

import pytest
import requests

from pfs import chunks, paths, services, transfer, uploads
from pfs.paths import PathError

from .conftest import write

A = "/pfs/local/home/alice"

# Values exactly as they appear in a URL query string (so the server does the decoding).
ENCODED = [
    f"{A}/../bob/secret.txt",
    f"{A}/../../../../../../etc/passwd",
    f"{A}/%2e%2e/bob/secret.txt",
    f"{A}/%2E%2E%2Fbob%2Fsecret.txt",
    f"{A}/.%2e/bob",
    f"{A}/%2e./bob",
    "%2Fpfs%2Flocal%2Fhome%2Fbob%2Fsecret.txt",
    f"{A}/..%5C..%5Cbob",
    f"{A}/..\\..\\bob",
    f"{A}/%E2%80%A4%E2%80%A4/bob",  # one dot leader x2 (NFKC: "..")
    f"{A}/%EF%BC%8E%EF%BC%8E/bob",  # fullwidth full stops
    f"{A}/..%EF%BC%8Fbob",  # fullwidth solidus
    f"{A}/..%E2%88%95bob",  # division slash
    f"{A}/x%00/../../bob",
    f"{A}/a%0Ab",
    f"{A}/a%1Bb",
    f"{A}/a%7Fb",
    f"{A}/%C0%AE%C0%AE/bob",  # overlong UTF-8 for ".."
    f"{A}/%E0%80%AE%E0%80%AE/bob",
    f"{A}/%C0%AF..",  # overlong "/"
    f"{A}/%E2%80%AEtxt.exe",  # right-to-left override
    "/etc/passwd",
    "etc/passwd",
    "pfs/local/home/alice/x",
    "/pfs/../etc/passwd",
    "/pfs/local/home/bob/secret.txt",
    "/pfs/local/home/bob",
    "/pfs/local/home/",
    "/pfs/local/",
    "/pfs/",
    "/pfs/nodc/home/alice/x",
    "/pfs/local/public/../home/bob/secret.txt",
    f"{A}/" + "a" * 300,
    f"{A}/" + "a/" * 2100,
]

# Links alice's jobs could have planted in her home, and what may be reached through them.
LINKED = [f"{A}/etc/passwd", f"{A}/etc", f"{A}/bobhome/secret.txt", f"{A}/bobhome", f"{A}/pub/dataset.txt",
          f"{A}/outside/sentinel.txt", f"{A}/dir/up/sentinel.txt"]

WRITE_ONLY = ["/pfs/local/public/new.txt", "/pfs/local/public/dataset.txt", "/pfs/local/public"]


@pytest.fixture
def world(settings, alice, bob, home_dir, public_dir, tmp_path):
    bob_home = settings.PFS_ROOT / "local" / "home" / "bob"
    write(bob_home / "secret.txt", b"bob's secret")
    outside = tmp_path / "outside"
    write(outside / "sentinel.txt", b"outside")
    write(home_dir / "mine.txt", b"alice's file")
    (home_dir / "dir").mkdir()
    os.symlink("/etc", home_dir / "etc")
    os.symlink(bob_home, home_dir / "bobhome")
    os.symlink(public_dir, home_dir / "pub")
    os.symlink(outside, home_dir / "outside")
    os.symlink("../../../..", home_dir / "dir" / "up")
    return {"bob": bob_home, "outside": outside, "public": public_dir}


def snapshot(*dirs):
    out = {}
    for d in dirs:
        for root, subdirs, files in os.walk(d):
            for name in files + subdirs:
                full = os.path.join(root, name)
                st = os.lstat(full)
                out[full] = (st.st_size, st.st_mtime_ns)
    return out


def api_calls(client, raw):
    """Every /api/v2 storage endpoint, with the hostile path in each place a path goes."""
    dec = _decoded(raw)  # JSON bodies carry what the query string decodes to
    ok = f"{A}/mine.txt"
    yield "list", client.get(f"/api/v2/files/?path={raw}")
    yield "stat", client.get(f"/api/v2/files/stat/?path={raw}")
    yield "download", client.get(f"/api/v2/files/content/?path={raw}")
    yield "delete", client.delete(f"/api/v2/files/?path={raw}&recursive=true")
    yield "put", client.put(f"/api/v2/files/content/?path={raw}", data=b"x", content_type="application/octet-stream")
    yield "mkdir", client.post("/api/v2/files/mkdir/", {"path": dec}, format="json")
    yield "move-src", client.post("/api/v2/files/move/", {"src": dec, "dst": f"{A}/moved"}, format="json")
    yield "move-dst", client.post("/api/v2/files/move/", {"src": ok, "dst": dec}, format="json")
    yield "copy-src", client.post("/api/v2/files/copy/", {"src": dec, "dst": f"{A}/copied"}, format="json")
    yield "copy-dst", client.post("/api/v2/files/copy/", {"src": ok, "dst": dec}, format="json")
    yield "upload", client.post("/api/v2/uploads/", {"path": dec, "size": 1}, format="json")
    yield "share", client.post("/api/v2/shares/", {"path": dec}, format="json")


def page_calls(client, raw):
    vpath = raw.removeprefix("/pfs/") if raw.startswith("/pfs/") else raw
    yield "browse", client.get(f"/files/{vpath}")
    yield "listing", client.get(f"/files/-/listing/?path={raw}")
    raw = _decoded(raw)  # form bodies carry what the query string decodes to
    for name, url, data in [("mkdir", "/files/-/mkdir/", {"dir": raw, "name": "x"}),
                            ("rename", "/files/-/rename/", {"dir": A, "path": raw, "name": "renamed"}),
                            ("delete", "/files/-/delete/", {"dir": A, "path": raw}),
                            ("share", "/files/-/share/", {"dir": A, "path": raw})]:
        yield name, client.post(url, data)


def _decoded(raw):
    from urllib.parse import unquote

    return unquote(raw, errors="replace")


def assert_refused(name, resp, raw):
    assert 400 <= resp.status_code < 500, f"{name} {raw!r}: {resp.status_code} {resp.content[:200]!r}"
    if resp.status_code != 404 or name != "browse":
        body = resp.content.decode(errors="replace")
        assert body.strip(), f"{name}: a refusal must say why"


@pytest.mark.parametrize("raw", ENCODED + LINKED)
def test_api_refuses_hostile_paths(alice_api, world, raw):
    before = snapshot(world["bob"], world["outside"], world["public"])
    for name, resp in api_calls(alice_api, raw):
        assert_refused(name, resp, raw)
        assert "detail" in resp.json() or resp.status_code == 400, (name, resp.content)
    for name, resp in api_calls(alice_api, quote(_decoded(raw), safe="/")):
        assert_refused(name, resp, raw)
    assert snapshot(world["bob"], world["outside"], world["public"]) == before
    assert (world["bob"] / "secret.txt").read_bytes() == b"bob's secret"
    assert not (world["public"] / "new.txt").exists()


@pytest.mark.parametrize("raw", ENCODED[:12] + LINKED + ["/pfs/local/home/bob/secret.txt"])
def test_pages_refuse_hostile_paths(client, alice, world, raw):
    client.force_login(alice)
    before = snapshot(world["bob"], world["outside"], world["public"])
    for name, resp in page_calls(client, raw):
        if name in ("mkdir", "rename", "delete", "share"):
            # htmx actions answer the refreshed listing carrying the error
            assert resp.status_code < 500
            body = resp.content.decode()
            assert 'class="flash error"' in body or 'class="banner"' in body, (name, raw, body[:300])
        else:
            assert 400 <= resp.status_code < 500, (name, raw, resp.status_code)
    assert snapshot(world["bob"], world["outside"], world["public"]) == before


@pytest.mark.parametrize("raw", WRITE_ONLY)
def test_public_is_read_only_for_users(alice_api, world, raw):
    before = snapshot(world["public"])
    for name, resp in api_calls(alice_api, raw):
        if name in ("list", "stat", "download", "copy-src", "share"):
            continue  # reading public is allowed
        assert resp.status_code == 403 or resp.status_code == 400, (name, resp.status_code, resp.content)
    assert snapshot(world["public"]) == before


def test_public_readable_and_staff_writable(alice_api, staff, world):
    from tests.support import token_client

    r = alice_api.get("/api/v2/files/content/?path=/pfs/local/public/dataset.txt")
    assert r.status_code == 200 and b"".join(r.streaming_content) == b"public data\n"
    staff_api = token_client(staff)
    r = staff_api.put("/api/v2/files/content/?path=/pfs/local/public/new/data.bin", data=b"abc",
                      content_type="application/octet-stream")
    assert r.status_code == 201, r.content
    assert (world["public"] / "new" / "data.bin").read_bytes() == b"abc"


def test_double_encoding_stays_literal_inside_home(alice_api, world, home_dir):
    r = alice_api.post("/api/v2/files/mkdir/", {"path": f"{A}/%2e%2e/x"}, format="json")
    assert r.status_code == 201
    assert (home_dir / "%2e%2e" / "x").is_dir()
    r = alice_api.get(f"/api/v2/files/stat/?path={A}/%252e%252e/x")
    assert r.status_code == 200 and r.json()["path"] == f"{A}/%2e%2e/x"


def test_links_listed_not_followed(alice_api, world):
    r = alice_api.get(f"/api/v2/files/?path={A}&limit=100")
    types = {e["name"]: e["type"] for e in r.json()["results"]}
    assert types["etc"] == "link" and types["bobhome"] == "link" and types["mine.txt"] == "file"
    r = alice_api.get(f"/api/v2/files/content/?path={A}")  # the home as a zip: links left out
    data = b"".join(r.streaming_content)
    assert b"bob's secret" not in data and b"outside" not in data and b"alice's file" in data


def test_symlink_swapped_in_at_last_component_is_not_followed(alice_api, world, home_dir):
    os.symlink(world["bob"] / "secret.txt", home_dir / "innocent.txt")
    r = alice_api.get(f"/api/v2/files/content/?path={A}/innocent.txt")
    assert r.status_code == 403


@pytest.fixture(params=["openat2", "stepwise"])
def open_strategy(request, monkeypatch):
    """Both ways pfs.paths opens below a root: openat2, and the one for kernels without it."""
    if request.param == "stepwise":
        def no_openat2(*args):
            raise OSError(errno.ENOSYS, "openat2 not here")

        monkeypatch.setattr(paths, "_openat2", no_openat2)
    return request.param


def _swap_for_link(directory, target):
    """What a job racing the server could do: swap a checked directory for a link."""
    os.rename(directory, str(directory) + ".real")
    os.symlink(target, directory)


def test_a_directory_swapped_for_a_link_after_the_check_is_not_followed(alice, world, home_dir, open_strategy):
    write(home_dir / "data" / "secret.txt", b"alice's own")
    p = paths.resolve(alice, f"{A}/data/secret.txt")  # checked while "data" is a directory
    _swap_for_link(home_dir / "data", world["bob"])
    with pytest.raises(PathError) as e:
        transfer.open_file(p)
    assert e.value.status == 403 and "symbolic link" in e.value.message
    # a link that stays inside the home is still followed by openat2 (the step-wise way follows none)
    (home_dir / "data").unlink()
    os.symlink("data.real", home_dir / "data")
    if open_strategy == "openat2":
        fd, _ = transfer.open_file(p)
        assert os.read(fd, 100) == b"alice's own"
        os.close(fd)


def test_an_uploads_link_a_job_made_in_the_home_is_not_written_through(alice, world, home_dir, open_strategy):
    session = uploads.create(alice, f"{A}/new.bin", 5)
    target = world["outside"] / "part-target"
    target.mkdir()
    victim = target / f"{session.id}.part"
    victim.write_bytes(b"")
    os.symlink(target, home_dir / ".uploads")  # the old scratch's name: nothing special any more
    writer = uploads.ChunkWriter(uploads.get(alice, session.id), 0, 5)
    writer.write([b"01234"])
    writer.finish()
    assert (home_dir / "new.bin").read_bytes() == b"01234" and victim.read_bytes() == b""


@pytest.fixture
def racing_job(monkeypatch):
    """A job that has a directory swapped for a link whenever the server is not checking:
    every containment check sees the real directory, everything else the link."""
    raced = {}
    real_check = paths.PfsPath.ensure_contained

    def check_unswapped(self):
        if not raced:
            return real_check(self)
        os.unlink(raced["directory"])
        os.rename(str(raced["directory"]) + ".real", raced["directory"])
        try:
            return real_check(self)
        finally:
            _swap_for_link(raced["directory"], raced["target"])

    def start(directory, target):
        raced.update(directory=directory, target=target)
        _swap_for_link(directory, target)

    monkeypatch.setattr(paths.PfsPath, "ensure_contained", check_unswapped)
    return start


RACED_OPERATIONS = {
    "mkdir": lambda u: services.mkdir(u, f"{A}/data/new/deeper"),
    "remove a file": lambda u: services.remove(u, f"{A}/data/f.txt"),
    "remove a tree": lambda u: services.remove(u, f"{A}/data/sub", recursive=True),
    "move in": lambda u: services.move(u, f"{A}/mine.txt", f"{A}/data/moved.txt"),
    "move out": lambda u: services.move(u, f"{A}/data/f.txt", f"{A}/taken.txt"),
    "copy a tree out": lambda u: services.copy(u, f"{A}/data", f"{A}/copied"),
    "copy a file in": lambda u: services.copy(u, f"{A}/mine.txt", f"{A}/data/copied.txt"),
    "write a file": lambda u: services.write_file(u, f"{A}/data/new.txt", [b"new"], length=3),
    "touch (legacy)": lambda u: chunks.touch(u, f"{A}/data/new.bin", 10),
}


@pytest.mark.parametrize("operation", RACED_OPERATIONS)
def test_a_directory_swapped_for_a_link_between_check_and_change_leads_nowhere(
        alice, world, home_dir, racing_job, open_strategy, operation):
    for base, text in ((home_dir / "data", b"alice's"), (world["outside"], b"outside")):
        write(base / "f.txt", text)
        write(base / "sub" / "g.txt", text)
    outside_before = snapshot(world["outside"])
    racing_job(home_dir / "data", world["outside"])
    with pytest.raises(PathError) as e:
        RACED_OPERATIONS[operation](alice)
    assert e.value.status == 403
    assert snapshot(world["outside"]) == outside_before
    assert (home_dir / "mine.txt").read_bytes() == b"alice's file"
    assert not any((home_dir / name).exists() for name in ("taken.txt", "copied"))


def test_a_zipped_directory_swapped_for_a_link_while_streaming_sends_nothing_from_outside(
        alice, world, home_dir, open_strategy):
    for base, text in ((home_dir / "data", b"alice's"), (world["outside"], b"outside")):
        write(base / "f.txt", text)
        write(base / "sub" / "g.txt", text)
    response = transfer.download(alice, f"{A}/data")  # the directory is opened and walked now
    _swap_for_link(home_dir / "data", world["outside"])
    sent = b"".join(response.streaming_content)
    assert len(sent) == int(response["Content-Length"]) and b"outside" not in sent
    with zipfile.ZipFile(io.BytesIO(sent)) as z:  # whole, and what was opened: alice's own
        assert z.testzip() is None
        assert {n: z.read(n) for n in z.namelist()} == {"f.txt": b"alice's", "sub/g.txt": b"alice's"}


def _swapping(directory, target, stop):
    """A job swapping `directory` for a link to `target` and back, as fast as it can."""
    rounds = 0
    while not stop.is_set():
        _swap_for_link(directory, target)
        os.unlink(directory)
        os.rename(str(directory) + ".real", directory)
        rounds += 1
    return rounds


def test_a_job_swapping_a_directory_for_a_link_to_bobs_home_never_exposes_it(
        transactional_db, alice, world, home_dir, open_strategy):
    from accounts.services import issue_token
    from tests.support import LiveASGI

    write(world["bob"] / "bobs-name.txt", b"bob's")
    write(world["bob"] / "bobsdir" / "deeper.txt", b"bob's")
    for rel in ("alices.txt", "sub/inner.txt"):
        write(home_dir / "data" / rel, b"alice's")
    stop, answers = threading.Event(), []
    with LiveASGI() as live, requests.Session() as s:
        s.headers["Authorization"] = f"Token {issue_token(alice)}"
        swapper = ThreadWithResult(_swapping, home_dir / "data", world["bob"], stop)
        try:
            for _ in range(120):
                for what, url in (("list", f"/api/v2/files/?path={A}/data"),
                                  ("list", f"/api/v2/files/?path={A}/data/sub"),
                                  ("stat", f"/api/v2/files/stat/?path={A}/data/alices.txt"),
                                  ("stat", f"/api/v2/files/stat/?path={A}/data/bobs-name.txt"),
                                  ("zip", f"/api/v2/files/content/?path={A}/data")):
                    r = s.get(live.url + url, timeout=60)
                    answers.append(r.status_code)
                    assert r.status_code < 500, (what, r.status_code, r.text[:300])
                    if r.status_code != 200:
                        continue
                    assert b"bob" not in r.content, (what, r.content[:300])  # no name, no byte of bob's
                    if what == "zip":
                        assert len(r.content) == int(r.headers["Content-Length"])
                        with zipfile.ZipFile(io.BytesIO(r.content)) as z:
                            assert z.testzip() is None
                            assert set(z.namelist()) == {"alices.txt", "sub/inner.txt"}
        finally:
            stop.set()
            rounds = swapper.join()
    assert rounds > 100 and 200 in answers and any(400 <= a < 500 for a in answers), (rounds, set(answers))


class ThreadWithResult(threading.Thread):
    def __init__(self, fn, *args):
        super().__init__(daemon=True)
        self.fn, self.args, self.result = fn, args, None
        self.start()

    def run(self):
        self.result = self.fn(*self.args)

    def join(self, timeout=30):
        super().join(timeout)
        return self.result


def test_housekeeping_does_not_sweep_through_a_linked_uploads_directory(alice, world, home_dir):
    old = world["outside"] / "old.bin"
    write(old, b"not an upload")
    os.utime(old, (0, 0))
    (home_dir / ".uploads").mkdir(exist_ok=True)
    _swap_for_link(home_dir / ".uploads", world["outside"])
    uploads.cleanup_stale()
    assert old.read_bytes() == b"not an upload"


@pytest.mark.parametrize("raw", [_decoded(x) for x in ENCODED[:14]] + LINKED)
def test_legacy_chunk_operations_refuse(alice, world, raw):
    for call in (lambda: chunks.chunk_meta(alice, raw, 0, 4096), lambda: chunks.touch(alice, raw, 10),
                 lambda: chunks.write_range(alice, raw, 0, lambda n: b"x", 1),
                 lambda: list(chunks.read_range(alice, raw, 0, 4096))):
        with pytest.raises(PathError) as e:
            call()
        assert 400 <= e.value.status < 500 and e.value.message


def test_refusals_say_why(alice_api, world):
    r = alice_api.get("/api/v2/files/?path=/pfs/local/home/bob")
    assert r.status_code == 403 and "own home" in r.json()["detail"]
    r = alice_api.get(f"/api/v2/files/?path={A}/../x")
    assert r.status_code == 400 and "'..'" in r.json()["detail"]
    r = alice_api.get(f"/api/v2/files/?path={A}/etc")
    assert r.status_code == 403 and "symbolic link" in r.json()["detail"]
    r = alice_api.post("/api/v2/files/mkdir/", {"path": "/pfs/local/public/x"}, format="json")
    assert r.status_code == 403 and "read-only" in r.json()["detail"]
    assert json.loads(alice_api.get(f"/api/v2/files/?path={A}/%00").content)["detail"]


# A path of fewer than 4096 characters but more than 4096 bytes (the kernel's PATH_MAX counts
# bytes): each name is 255 bytes, as check_name allows.
CJK_NAME = "中" * 85
LONG_CJK = A + f"/{CJK_NAME}" * 40  # 3461 characters, 10261 bytes


@pytest.mark.parametrize("call", [
    lambda api: api.get("/api/v2/files/stat/", {"path": LONG_CJK}),
    lambda api: api.get("/api/v2/files/", {"path": LONG_CJK}),
    lambda api: api.delete(f"/api/v2/files/?path={quote(LONG_CJK)}"),
    lambda api: api.post("/api/v2/files/mkdir/", {"path": LONG_CJK}, format="json"),
    lambda api: api.put(f"/api/v2/files/content/?path={quote(LONG_CJK)}", data=b"x",
                        content_type="application/octet-stream"),
    lambda api: api.post("/api/v2/uploads/", {"path": LONG_CJK, "size": 1}, format="json"),
], ids=["stat", "list", "delete", "mkdir", "put", "upload"])
def test_a_path_over_path_max_in_bytes_is_refused_and_makes_nothing(alice_api, home_dir, call):
    assert len(LONG_CJK) <= paths.MAX_PATH_LENGTH < len(LONG_CJK.encode())
    alice_api.raise_request_exception = False
    r = call(alice_api)
    assert r.status_code == 400, (r.status_code, r.content[:200])
    assert "bytes" in r.json()["detail"]
    assert not any(CJK_NAME in dirs for _root, dirs, _files in os.walk(home_dir))


def test_a_name_too_long_for_the_kernel_is_a_400_when_opened(home_dir):
    """The kernel's own ENAMETOOLONG, for a path that got past the checks, is a refusal too."""
    with pytest.raises(PathError) as e:
        paths.open_beneath(home_dir, (CJK_NAME,) * 40, os.O_RDONLY, virtual=LONG_CJK)
    assert e.value.status == 400 and "too long" in e.value.message
