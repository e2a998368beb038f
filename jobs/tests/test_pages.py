"""The browser pages: submit form with package upload, list, detail, partials, kill, delete."""

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from jobs import services
from jobs.live import logstore
from jobs.models import Job
from pfs.paths import home
from tests.support import make_package

pytestmark = pytest.mark.django_db

FORM = {"name": "fit", "datacenter": "local", "mode": "ps", "source": "upload", "entry": "python train.py",
        "trainers": 2, "pservers": 2, "cpu": "1", "memory": "1Gi", "gpu": 0, "pscpu": "1", "psmemory": "1Gi",
        "passes": 3, "env": "", "image": "", "registry": "", "package": ""}


@pytest.fixture
def web(client, alice):
    client.force_login(alice)
    return client


def zipped(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return SimpleUploadedFile("pkg.zip", buf.getvalue(), "application/zip")


def test_pages_need_login(client):
    res = client.get("/jobs/")
    assert res.status_code == 302 and res.url.startswith("/login/")


def test_login_page_logs_in(client, alice):
    res = client.post("/login/", {"username": "alice", "password": "password"})
    assert res.status_code == 302
    assert client.get("/jobs/").status_code == 200


def test_submit_form_shows_help_for_every_field(web):
    page = web.get("/jobs/new/").content.decode()
    for text in ["Unique among your jobs", "Number of trainer processes", "Memory per trainer",
                 "one NAME=value per line", "one .zip / .tar.gz"]:
        assert text in page


def test_uploading_files_puts_the_package_in_storage_and_submits(web, alice):
    files = [SimpleUploadedFile("train.py", b"print('hi')\n"), SimpleUploadedFile("requirements.txt", b"")]
    res = web.post("/jobs/new/", {**FORM, "files": files, "env": "A=1\nB = two=2"})
    assert res.status_code == 302 and res.url == "/jobs/fit/"
    job = Job.objects.get(name="fit")
    assert job.package == "/pfs/local/home/alice/jobs/fit"
    assert job.env == {"A": "1", "B": "two=2"}
    pkg = home(alice, "local").child("jobs", "fit").disk
    assert (pkg / "train.py").read_text() == "print('hi')\n"


def test_uploading_a_zip_unpacks_it(web, alice):
    res = web.post("/jobs/new/", {**FORM, "files": [zipped({"train.py": "x = 1\n", "lib/util.py": "y = 2\n"})]})
    assert res.status_code == 302
    pkg = home(alice, "local").child("jobs", "fit").disk
    assert (pkg / "lib" / "util.py").read_text() == "y = 2\n"


def test_a_zip_escaping_its_directory_is_refused_and_leaves_nothing(web, alice):
    res = web.post("/jobs/new/", {**FORM, "files": [zipped({"../../evil.py": "x"})]})
    assert res.status_code == 200
    assert "not allowed" in res.context["form"].errors["files"][0]
    assert not Job.objects.exists()
    user_home = home(alice, "local").disk
    assert not (user_home / "jobs" / "fit").exists()
    assert not any((user_home.parent.parent / ".scratch" / "alice").iterdir())  # no staging left


@pytest.mark.parametrize("field,value,message", [
    ("name", "fit_a_line", "no '_'"),
    ("trainers", 0, "at least 1"),
    ("memory", "lots", "not a memory amount"),
])
def test_bad_submissions_show_errors_beside_the_field_and_store_nothing(web, alice, field, value, message):
    files = [SimpleUploadedFile("train.py", b"print('hi')\n")]
    res = web.post("/jobs/new/", {**FORM, field: value, "files": files})
    assert res.status_code == 200
    assert message in res.context["form"].errors[field][0]
    html = res.content.decode()
    assert f'id="field-{field}"' in html and "has-error" in html
    assert not Job.objects.exists()
    assert not (home(alice, "local").disk / "jobs").exists() or not any((home(alice, "local").disk / "jobs").iterdir())


def test_a_missing_package_and_a_duplicate_name_get_field_errors(web, alice):
    res = web.post("/jobs/new/", {**FORM, "source": "pfs", "package": "/pfs/local/home/alice/nothing"})
    assert "not a directory" in res.context["form"].errors["package"][0]
    pkg = make_package(alice, "fit", {"train.py": ""})
    assert web.post("/jobs/new/", {**FORM, "source": "pfs", "package": pkg}).status_code == 302
    res = web.post("/jobs/new/", {**FORM, "source": "pfs", "package": pkg})
    assert "already have a job named 'fit'" in res.context["form"].errors["name"][0]
    assert Job.objects.count() == 1


def test_a_failed_duplicate_upload_keeps_the_existing_package(web, alice):
    pkg = make_package(alice, "fit", {"train.py": "original\n"})
    services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    res = web.post("/jobs/new/", {**FORM, "files": [SimpleUploadedFile("train.py", b"new\n")]})
    assert "already have a job" in res.context["form"].errors["name"][0]
    assert (home(alice, "local").child("jobs", "fit").disk / "train.py").read_text() == "original\n"


def test_list_detail_and_partials(web, alice, bob):
    pkg = make_package(alice, "fit", {"train.py": ""})
    job = services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    logstore.append(job.replicas.get(role="trainer"), b"hello from the trainer\n")
    assert "fit" in web.get("/jobs/").content.decode()
    assert "fit" in web.get("/jobs/", headers={"HX-Request": "true"}).content.decode()
    detail = web.get("/jobs/fit/").content.decode()
    assert "pserver-0" in detail and "Submitted" in detail
    part = web.get("/jobs/fit/?part=status", headers={"HX-Request": "true"})
    assert part.templates[0].name == "jobs/_job_status.html"
    assert "hello from the trainer" in web.get("/jobs/fit/logs/trainer-0/").content.decode()
    assert web.get("/jobs/fit/metrics/").json() == {"replicas": {}}


def test_other_users_jobs_are_not_found(client, alice, bob):
    pkg = make_package(alice, "fit", {"train.py": ""})
    services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    client.force_login(bob)
    for url in ["/jobs/fit/", "/jobs/fit/logs/trainer-0/", "/jobs/fit/metrics/"]:
        assert client.get(url).status_code == 404
    for url in ["/jobs/fit/kill/", "/jobs/fit/delete/"]:
        assert client.post(url).status_code == 404
    assert Job.objects.get().state == "Queued"


def test_kill_and_delete_buttons(web, alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    assert web.post("/jobs/fit/kill/").status_code == 302
    assert Job.objects.get().state == "Killed"
    assert web.post("/jobs/fit/delete/").status_code == 302
    assert web.get("/jobs/fit/").status_code == 404


def test_metric_lines_become_series(web, alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    job = services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    logstore.append(job.replicas.get(role="trainer"),
                    b'noise\nPADDLECLOUD_METRIC {"step": 1, "loss": 2.5}\n'
                    b'PADDLECLOUD_METRIC {"step": 2, "loss": 1.5, "acc": 0.5}\nPADDLECLOUD_METRIC not json\n'
                    + b"PADDLECLOUD_METRIC " + b"[" * 100_000 + b"\n")  # nested past the recursion limit
    assert web.get("/jobs/fit/metrics/").json() == {
        "replicas": {"trainer-0": {"acc": [None, 0.5], "loss": [2.5, 1.5], "step": [1.0, 2.0],
                                   "wall": [None, None]}}}  # no wall key, not seen by a watcher


def test_a_queued_jobs_page_says_no_worker_is_running(web, alice):
    from core import health

    pkg = make_package(alice, "fit", {"train.py": ""})
    services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    health.forget("worker")
    assert "Waiting: no worker is running" in web.get("/jobs/fit/").content.decode()
    health.beat("worker")
    try:
        assert "Waiting:" not in web.get("/jobs/fit/").content.decode()
    finally:
        health.forget("worker")
