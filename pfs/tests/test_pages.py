"""The file browser pages and their htmx actions; legacy chunk operations; job outputs."""

import hashlib
import io

import pytest

from pfs import chunks, services
from pfs.paths import PathError

from .conftest import write

A = "/pfs/local/home/alice"


@pytest.fixture
def browser(client, alice):
    client.force_login(alice)
    return client


def test_files_redirects_home_and_lists(browser, home_dir):
    write(home_dir / "data" / "train.txt", b"1 2 3\n")
    r = browser.get("/files/")
    assert r.status_code == 302 and r["Location"] == "/files/local/home/alice/"
    r = browser.get("/files/local/home/alice/")
    html = r.content.decode()
    assert r.status_code == 200
    assert 'href="/files/local/home/alice/data/"' in html and "usage-bar" in html
    assert "js/pfs.js" in html and 'id="dropzone"' in html
    r = browser.get("/files/local/home/alice/data/")
    html = r.content.decode()
    assert "train.txt" in html and 'href="/files/local/home/alice/"' in html  # breadcrumbs
    assert "/api/v2/files/content/?path=/pfs/local/home/alice/data/train.txt" in html
    # a file's page URL downloads it
    r = browser.get("/files/local/home/alice/data/train.txt")
    assert r.status_code == 302 and "/api/v2/files/content/" in r["Location"]


def test_login_required(client, alice):
    assert client.get("/files/local/home/alice/").status_code == 302
    assert client.post("/files/-/mkdir/", {"dir": A, "name": "x"}).status_code == 302


def test_actions(browser, home_dir):
    r = browser.post("/files/-/mkdir/", {"dir": A, "name": "models"}, HTTP_HX_REQUEST="true")
    assert r.status_code == 200 and "Folder models created" in r.content.decode()
    assert (home_dir / "models").is_dir()
    r = browser.post("/files/-/mkdir/", {"dir": A, "name": "../x"})
    assert "flash error" in r.content.decode() and not (home_dir.parent / "x").exists()
    write(home_dir / "models" / "m.bin", b"weights")
    r = browser.post("/files/-/rename/", {"dir": f"{A}/models", "path": f"{A}/models/m.bin", "name": "final.bin"})
    assert "Renamed to final.bin" in r.content.decode() and (home_dir / "models" / "final.bin").exists()
    r = browser.post("/files/-/share/", {"dir": f"{A}/models", "path": f"{A}/models/final.bin", "expires_days": "7"})
    html = r.content.decode()
    assert "/filepub/?uuid=" in html and "Your share links" in html
    r = browser.post("/files/-/delete/", {"dir": A, "path": f"{A}/models"})
    assert "Deleted models" in r.content.decode() and not (home_dir / "models").exists()


@pytest.mark.parametrize("days", ["0", "-3", "5000", "1.5", "soon"])
def test_an_expiry_the_form_refuses_makes_no_link_at_all(browser, home_dir, days):
    """Not one that never expires: the owner asked for one that does."""
    from pfs.models import ShareLink

    write(home_dir / "secret.bin", b"weights")
    r = browser.post("/files/-/share/", {"dir": A, "path": f"{A}/secret.bin", "expires_days": days},
                     HTTP_HX_REQUEST="true")
    assert "flash error" in r.content.decode() and not ShareLink.objects.exists()


def test_public_page_is_read_only(browser, public_dir):
    html = browser.get("/files/local/public/").content.decode()
    assert "dataset.txt" in html and 'id="dropzone"' not in html and "Delete" not in html


def test_usage_bar_shows_quota(browser, alice, datacenter, home_dir):
    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=1000)
    write(home_dir / "f", b"x" * 950)
    services.usage.recompute(alice, datacenter)
    html = browser.get("/files/local/home/alice/").content.decode()
    assert "950 B of 1000 B used (95%)" in html and 'class="full"' in html


def test_job_outputs_appear_in_browser(browser, alice, home_dir):
    """A job sees its owner's home (PADDLE_PFS_HOME on the local backend) and writes there."""
    from tests.support import make_package

    make_package(alice, "fit", {"train.py": "print('hi')\n"})
    # what the trainer writes under $PADDLE_PFS_HOME/jobs/fit/output
    write(home_dir / "jobs" / "fit" / "output" / "model.pdparams", b"params")
    html = browser.get("/files/local/home/alice/jobs/fit/output/").content.decode()
    assert "model.pdparams" in html
    r = browser.get("/api/v2/files/content/", {"path": f"{A}/jobs/fit/output"})
    import zipfile

    z = zipfile.ZipFile(io.BytesIO(b"".join(r.streaming_content)))
    assert z.read("model.pdparams") == b"params"


def test_legacy_chunk_operations(alice, home_dir):
    p = chunks.touch(alice, f"{A}/big/pre.bin", 10 * 2**20)
    assert p.disk.stat().st_size == 10 * 2**20 and p.disk.stat().st_blocks == 0  # sparse
    zero = hashlib.md5(bytes(4 << 20)).hexdigest()
    assert chunks.chunk_meta(alice, p.virtual, 0, 4 << 20) == {"offset": 0, "checksum": zero, "len": 4 << 20}
    assert chunks.chunk_meta(alice, p.virtual, 8 << 20, 4 << 20)["len"] == 2 << 20
    data = bytes(range(256)) * 4096 * 4  # 4 MiB
    src = io.BytesIO(data)
    assert chunks.write_range(alice, p.virtual, 4 << 20, src.read, len(data)) == len(data)
    meta = chunks.chunk_meta(alice, p.virtual, 4 << 20, 4 << 20)
    assert meta["checksum"] == hashlib.md5(data).hexdigest()
    assert b"".join(chunks.read_range(alice, p.virtual, 4 << 20, 4 << 20)) == data
    assert services.usage.get_usage(alice, "local").used_bytes == 10 * 2**20
    with pytest.raises(PathError):
        chunks.chunk_meta(alice, p.virtual, 0, 100)  # chunk size out of range
    with pytest.raises(PathError) as e:
        chunks.chunk_meta(alice, f"{A}/missing", 0, 4096)
    assert "no such file or directory" in e.value.message
    chunks.touch(alice, p.virtual, 2**20)  # resize
    assert p.disk.stat().st_size == 2**20
    assert services.usage.get_usage(alice, "local").used_bytes == 2**20


def test_touch_checks_quota(alice, datacenter, home_dir):
    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=2**20)
    with pytest.raises(PathError) as e:
        chunks.touch(alice, f"{A}/huge", 2**30)
    assert e.value.message.startswith("quota exceeded") and not (home_dir / "huge").exists()


def test_job_package_upload_counts_and_respects_quota(alice, datacenter, home_dir):
    """The job form's package upload goes through pfs.packages: counted, and refused over quota."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from pfs import packages
    from pfs.paths import home
    from quotas.models import Quota

    h = home(alice, "local")
    packages.save_package(h.child("jobs", "a"), [SimpleUploadedFile("train.py", b"x" * 100)])
    assert services.usage.get_usage(alice, "local").used_bytes == 100
    Quota.objects.create(datacenter=datacenter, user=alice, storage_bytes=150)
    with pytest.raises(PathError) as e:
        packages.save_package(h.child("jobs", "b"), [SimpleUploadedFile("train.py", b"x" * 100)])
    assert e.value.message == "quota exceeded: used 100 B of 150 B"
    assert not (home_dir / "jobs" / "b").exists()


def test_a_package_file_without_a_name_is_refused_and_leaves_nothing(alice, datacenter, home_dir):
    from django.core.files.uploadedfile import InMemoryUploadedFile

    from pfs import packages
    from pfs.paths import home

    nameless = InMemoryUploadedFile(io.BytesIO(b"x"), "files", None, "text/x-python", 1, None)
    with pytest.raises(PathError) as e:
        packages.save_package(home(alice, "local").child("jobs", "a"), [nameless])
    assert (e.value.status, e.value.message) == (400, "every file of a package needs a name")
    assert not (home_dir / "jobs").exists()
