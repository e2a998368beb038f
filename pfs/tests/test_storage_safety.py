"""What a job can leave in a home does not trick the server: a `.uploads` (the name partial data
had inside homes once) is an ordinary entry writes never use; hard links are counted once and never
served or written through; what a job wrote counts once the job ends, and then refuses uploads."""

import io
import os
import time
import zipfile

import pytest

from pfs import services, usage
from tests.support import deep_chain

from .conftest import scratch, write

A = "/pfs/local/home/alice"


@pytest.fixture(params=["a link to a directory outside", "a dangling link", "a file"])
def broken_uploads(request, home_dir, tmp_path):
    """What a job could have made of `.uploads` in alice's home; the directory a link points at."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (home_dir / "mine.txt").write_bytes(b"alice's")
    if request.param == "a file":
        (home_dir / ".uploads").write_bytes(b"")
    else:
        os.symlink(outside if "outside" in request.param else tmp_path / "nowhere", home_dir / ".uploads")
    return outside


def test_a_uploads_entry_a_job_made_does_not_matter_to_writes(alice_api, home_dir, broken_uploads):
    answers = {
        "upload": alice_api.post("/api/v2/uploads/", {"path": f"{A}/new.bin", "size": 0}, format="json"),
        "put": alice_api.put(f"/api/v2/files/content/?path={A}/put.bin", data=b"hello",
                             content_type="application/octet-stream"),
        "copy": alice_api.post("/api/v2/files/copy/", {"src": f"{A}/mine.txt", "dst": f"{A}/copy.txt"},
                               format="json"),
        "move": alice_api.post("/api/v2/files/move/", {"src": f"{A}/copy.txt", "dst": f"{A}/moved.txt"},
                               format="json"),
    }
    for name, r in answers.items():
        assert r.status_code in (200, 201), (name, r.status_code, r.content[:300])
    assert (home_dir / "put.bin").read_bytes() == b"hello" and (home_dir / "moved.txt").read_bytes() == b"alice's"
    assert not any(broken_uploads.iterdir())  # nothing written through the link
    # and listing shows it as the user's own entry
    r = alice_api.get(f"/api/v2/files/?path={A}")
    assert r.status_code == 200 and ".uploads" in [e["name"] for e in r.json()["results"]]


@pytest.fixture
def linked(alice, datacenter, home_dir):
    """A 1000-byte file with three names in alice's home, as a job could make with `ln`."""
    write(home_dir / "a.bin", b"a" * 1000)
    (home_dir / "sub").mkdir()
    os.link(home_dir / "a.bin", home_dir / "b.bin")
    os.link(home_dir / "a.bin", home_dir / "sub" / "c.bin")
    write(home_dir / "plain.txt", b"p" * 10)
    return home_dir


def test_hard_links_are_counted_once(alice, datacenter, linked):
    assert usage.recompute(alice, datacenter) == 1010
    assert usage.get_usage(alice, "local").used_bytes == 1010
    # removing one name frees nothing certain: the books keep the file until the last name goes
    assert services.remove(alice, f"{A}/b.bin") == 0
    assert usage.get_usage(alice, "local").used_bytes == 1010
    assert usage.recompute(alice, datacenter) == 1010


def test_hard_linked_files_are_neither_served_nor_written_through(alice_api, alice, linked, client):
    from pfs import chunks, shares

    for url in (f"/api/v2/files/content/?path={A}/a.bin", f"/api/v2/files/content/?path={A}/sub/c.bin"):
        r = alice_api.get(url)
        assert r.status_code == 403 and "other hard links" in r.json()["detail"], r.content
    r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/a.bin", "dst": f"{A}/copied.bin"}, format="json")
    assert r.status_code == 403 and "other hard links" in r.json()["detail"]
    r = alice_api.post("/api/v2/shares/", {"path": f"{A}/a.bin"}, format="json")
    assert r.status_code == 403 and "other hard links" in r.json()["detail"]
    write(linked / "solo.bin", b"s")  # shared while it was alice's alone, then linked by a job
    shared = shares.create(alice, f"{A}/solo.bin")
    os.link(linked / "solo.bin", linked / "solo-link.bin")
    r = client.get(f"/filepub/?uuid={shared.uuid}")
    assert r.status_code == 403 and b"other hard links" in r.content
    with pytest.raises(services.PathError) as e:
        chunks.write_range(alice, f"{A}/a.bin", 0, lambda n: b"x" * n, 4096)
    assert e.value.status == 403
    assert (linked / "a.bin").read_bytes() == b"a" * 1000
    # a zip of the home leaves them out; the plain file is there
    data = b"".join(alice_api.get(f"/api/v2/files/content/?path={A}").streaming_content)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.namelist() == ["plain.txt"]
    # a tree copy leaves them out too
    r = alice_api.post("/api/v2/files/copy/", {"src": f"{A}/sub", "dst": f"{A}/sub2"}, format="json")
    assert r.status_code == 201 and os.listdir(linked / "sub2") == []
    # once the other names are gone the file is alice's alone again, and served
    for name in ("b.bin", "sub/c.bin"):
        assert alice_api.delete(f"/api/v2/files/?path={A}/{name}").status_code == 204
    r = alice_api.get(f"/api/v2/files/content/?path={A}/a.bin")
    assert r.status_code == 200 and b"".join(r.streaming_content) == b"a" * 1000


def test_what_a_job_wrote_counts_when_it_ends_and_then_refuses_uploads(system, alice, datacenter, home_dir):
    from jobs.models import Job, JobState
    from jobs.state.transitions import transition
    from quotas.models import Quota
    from tests.support import token_client

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=2**20)
    api = token_client(alice)
    assert usage.get_usage(alice, "local").used_bytes == 0  # the books start before the job writes
    job = Job.objects.create(user=alice, datacenter=datacenter, name="writer", state=JobState.RUNNING,
                             package=f"{A}/jobs/writer", entry="python train.py")
    write(home_dir / "models" / "writer" / "weights.bin", b"w" * (2**20 + 1))  # what the job wrote
    assert transition(job, JobState.SUCCEEDED, "Completed")
    deadline = time.monotonic() + 60
    while usage.get_usage(alice, "local").used_bytes != 2**20 + 1:
        assert time.monotonic() < deadline, "the usage was not recounted after the job ended"
        time.sleep(0.1)
    for r in (api.post("/api/v2/uploads/", {"path": f"{A}/tiny.txt", "size": 1}, format="json"),
              api.put(f"/api/v2/files/content/?path={A}/one.txt", data=b"1", content_type="application/octet-stream")):
        assert r.status_code == 413 and r.json()["detail"] == "quota exceeded: used 1.0 MiB of 1.0 MiB", r.content
    # freeing space lets uploads in again
    assert api.delete(f"/api/v2/files/?path={A}/models&recursive=true").status_code == 204
    r = api.post("/api/v2/uploads/", {"path": f"{A}/tiny.txt", "size": 1}, format="json")
    assert r.status_code == 201, r.content


def test_pfs_usage_command_recounts_homes(alice, datacenter, home_dir):
    from django.core.management import call_command

    assert usage.get_usage(alice, "local").used_bytes == 0
    write(home_dir / "written-by-a-job.bin", b"j" * 4096)
    out = io.StringIO()
    call_command("pfs_usage", stdout=out)
    assert "recomputed 1 homes" in out.getvalue()
    assert usage.get_usage(alice, "local").used_bytes == 4096


def test_a_recount_keeps_what_was_written_behind_the_walker(alice, datacenter, home_dir, monkeypatch):
    write(home_dir / "old.bin", b"o" * 100)
    usage.recompute(alice, datacenter)
    real_walk = usage.home_size

    def walk_then_a_write_lands(h):
        size = real_walk(h)  # the walk is over: this upload lands where it already looked
        services.write_file(alice, f"{A}/late.bin", [b"l" * 50], length=50)
        return size

    monkeypatch.setattr(usage, "home_size", walk_then_a_write_lands)
    assert usage.recompute(alice, datacenter) == 150
    assert usage.get_usage(alice, "local").used_bytes == 150


@pytest.mark.timeout(120)
def test_a_very_deep_tree_in_one_home_is_counted_and_stops_no_recount(settings, alice, bob, home_dir):
    """A job can nest directories deeper than Python's recursion limit in its home; the recount
    (the only thing that sees what jobs write there) must count all of it and every other home."""
    from pfs.models import StorageUsage
    from pfs.tasks import housekeeping

    write(home_dir / "out" / "model.bin", b"m" * 4990)
    write(settings.PFS_ROOT / "local" / "home" / "bob" / "out" / "model.bin", b"b" * 700)
    with deep_chain(home_dir / "deep", leaf=b"x" * 10):
        assert housekeeping()["homes"] == 2
    assert StorageUsage.objects.get(user=bob).used_bytes == 700
    assert StorageUsage.objects.get(user=alice).used_bytes == 5000  # the bottom of the chain too


def test_a_home_that_fails_to_recount_stops_no_other(settings, alice, bob, home_dir, monkeypatch, caplog):
    from pfs.models import StorageUsage

    write(settings.PFS_ROOT / "local" / "home" / "bob" / "model.bin", b"b" * 700)
    real_size = usage.home_size

    def alice_unreadable(h):
        if h.owner == "alice":
            raise OSError("cannot read it")
        return real_size(h)

    monkeypatch.setattr(usage, "home_size", alice_unreadable)
    assert usage.recompute_all() == 1
    assert StorageUsage.objects.get(user=bob).used_bytes == 700
    assert "alice's home" in caplog.text


def test_file_and_tree_copies_go_through_one_kernel_copier(alice, home_dir, monkeypatch):
    from pfs import storage

    copied = []
    real = storage._copy_bytes

    def recording(src, dst, size):
        copied.append(size)
        return real(src, dst, size)

    monkeypatch.setattr(storage, "_copy_bytes", recording)
    data = os.urandom(3 * 2**20 + 7)
    write(home_dir / "one.bin", data)
    write(home_dir / "tree" / "a.bin", data[:100])
    services.copy(alice, f"{A}/one.bin", f"{A}/two.bin")
    services.copy(alice, f"{A}/tree", f"{A}/tree2")
    assert copied == [len(data), 100]
    assert (home_dir / "two.bin").read_bytes() == data and (home_dir / "tree2" / "a.bin").read_bytes() == data[:100]
    assert usage.get_usage(alice, "local").used_bytes == 2 * (len(data) + 100)
    assert not [p for p in scratch(home_dir).iterdir() if p.name != ".lock"]  # no temporary file left
