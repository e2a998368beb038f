"""/api/v2 jobs: thin views over the services; owners only; errors keyed by field."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs import services
from jobs.live import logstore
from jobs.models import Job
from tests.support import make_package

pytestmark = pytest.mark.django_db


@pytest.fixture
def pkg(alice):
    return make_package(alice, "fit", {"train.py": "print('hi')\n"})


def submit(api, pkg, **fields):
    data = {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1, "trainers": 2, **fields}
    return api.post("/api/v2/jobs/", data, format="json")


def test_create_returns_the_job_with_replicas_and_events(alice_api, pkg):
    res = submit(alice_api, pkg)
    assert res.status_code == 201, res.json()
    body = res.json()
    assert body["state"] == "Queued"
    assert [r["name"] for r in body["replicas"]] == ["pserver-0", "trainer-0", "trainer-1"]
    assert body["events"][0]["reason"] == "Submitted"


def test_create_errors_are_keyed_by_field(alice_api, pkg):
    res = submit(alice_api, pkg, name="bad_name", trainers=0, memory="lots")
    assert res.status_code == 400
    body = res.json()
    assert set(body) == {"name", "trainers", "memory"}
    assert "not a memory amount" in body["memory"][0]
    assert not Job.objects.exists()


def test_quota_errors_without_a_field_are_non_field_errors(alice_api, pkg, datacenter):
    datacenter.quotas.update(max_running_jobs=0)
    res = submit(alice_api, pkg)
    assert res.status_code == 400
    assert res.json()["non_field_errors"] == ["your quota allows no running jobs in this datacenter"]


def test_anonymous_and_bad_tokens_are_refused():
    assert APIClient().get("/api/v2/jobs/").status_code == 401
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert client.get("/api/v2/jobs/").status_code == 401


def test_session_login_works_for_the_api(alice, pkg):
    client = APIClient()
    client.force_login(alice)
    assert client.get("/api/v2/jobs/").status_code == 200


def test_users_never_see_each_others_jobs(alice_api, bob_api, pkg):
    submit(alice_api, pkg)
    assert bob_api.get("/api/v2/jobs/").json()["results"] == []
    for method, url in [("get", "/api/v2/jobs/fit/"), ("post", "/api/v2/jobs/fit/kill/"),
                        ("get", "/api/v2/jobs/fit/logs/"), ("delete", "/api/v2/jobs/fit/")]:
        assert getattr(bob_api, method)(url).status_code == 404, url
    assert Job.objects.get(name="fit").state == "Queued"


def test_list_filters_by_state_and_paginates(alice, alice_api, pkg, datacenter):
    datacenter.quotas.update(cpu_millicores=100_000)
    for i in range(3):
        submit(alice_api, pkg, name=f"job-{i}")
    Job.objects.filter(name="job-0").update(state="Succeeded")
    body = alice_api.get("/api/v2/jobs/?state=Queued").json()
    assert sorted(j["name"] for j in body["results"]) == ["job-1", "job-2"]
    page = alice_api.get("/api/v2/jobs/?limit=1").json()
    assert len(page["results"]) == 1 and page["next"]
    assert [j["name"] for j in alice_api.get("/api/v2/jobs/?active=false").json()["results"]] == ["job-0"]


def test_list_and_detail_do_not_query_per_job(alice_api, pkg, datacenter):
    datacenter.quotas.update(cpu_millicores=100_000, memory_bytes=2**40, max_running_jobs=100)
    for i in range(2):
        submit(alice_api, pkg, name=f"job-{i}")
    with CaptureQueriesContext(connection) as few:
        alice_api.get("/api/v2/jobs/")
    for i in range(2, 8):
        submit(alice_api, pkg, name=f"job-{i}")
    with CaptureQueriesContext(connection) as many:
        alice_api.get("/api/v2/jobs/")
    assert len(many) == len(few)
    with CaptureQueriesContext(connection) as detail:
        alice_api.get("/api/v2/jobs/job-1/")
    assert len(detail) <= 6


def test_kill_and_delete(alice_api, pkg):
    submit(alice_api, pkg)
    res = alice_api.post("/api/v2/jobs/fit/kill/")
    assert res.status_code == 200 and res.json()["state"] == "Killed"
    again = alice_api.post("/api/v2/jobs/fit/kill/")
    assert again.status_code == 400 and "already ended" in again.json()["state"][0]
    assert alice_api.delete("/api/v2/jobs/fit/").status_code == 204
    assert alice_api.get("/api/v2/jobs/fit/").status_code == 404
    assert Job.objects.get(name="fit").deleting  # the delete task removes the row after cleanup


def test_logs_tail_and_resume_from_an_offset(alice, alice_api, pkg):
    submit(alice_api, pkg)
    job = Job.objects.get(name="fit")
    trainer = job.replicas.get(role="trainer", index=1)
    logstore.append(trainer, b"".join(f"line {i}\n".encode() for i in range(10)))

    tail = alice_api.get("/api/v2/jobs/fit/logs/?replica=trainer-1&lines=3").json()
    assert tail == [{"replica": "trainer-1", "text": "line 7\nline 8\nline 9\n", "offset": 49, "next_offset": 70,
                     "state": "Pending", "notice": ""}]
    logstore.append(trainer, b"line 10\n")
    more = alice_api.get(f"/api/v2/jobs/fit/logs/?replica=trainer-1&offset={tail[0]['next_offset']}").json()
    assert more[0]["text"] == "line 10\n" and more[0]["next_offset"] == 78

    everyone = alice_api.get("/api/v2/jobs/fit/logs/").json()
    assert [e["replica"] for e in everyone] == ["pserver-0", "trainer-0", "trainer-1"]
    bad = alice_api.get("/api/v2/jobs/fit/logs/?replica=trainer-9")
    assert bad.status_code == 400 and "no replica 'trainer-9'" in bad.json()["replica"][0]


def test_deleting_a_job_frees_its_name_after_cleanup(alice, alice_api, pkg):
    from jobs.tasks import delete_job_task

    submit(alice_api, pkg)
    job = Job.objects.get(name="fit")
    services.delete_job(job)
    res = submit(alice_api, pkg)
    assert res.status_code == 400 and "'fit' is still being deleted" in res.json()["name"][0]
    delete_job_task(job.pk)
    assert submit(alice_api, pkg).status_code == 201


def test_openapi_schema_and_offline_docs(alice_api, client):
    schema = alice_api.get("/api/v2/schema/")
    assert schema.status_code == 200 and b"/api/v2/jobs/{name}/kill/" in schema.content
    docs = client.get("/api/v2/docs/")
    assert docs.status_code == 200
    assert b"drf_spectacular_sidecar/swagger-ui-dist" in docs.content  # served locally, no CDN
    # Every script, style and icon is this site's, and nothing names another host (the page's
    # random CSRF token may spell "cdn", so the word itself proves nothing).
    urls = re.findall(rb'(?:src|href)="([^"]*)"', docs.content)
    assert urls and all(url.startswith(b"/static/") for url in urls)
    assert b"://" not in docs.content


def test_version_is_public(client):
    assert client.get("/api/v2/version/").json() == {"version": "0.1.0"}


def test_a_queued_job_says_when_it_waits_because_no_worker_is_running(alice_api, alice, pkg):
    from core import health

    assert alice_api.post("/api/v2/jobs/", {"name": "fit", "package": pkg, "entry": "python train.py",
                                            "pservers": 1}, format="json").status_code == 201
    health.forget("worker")
    assert "no worker is running" in alice_api.get("/api/v2/jobs/fit/").json()["waiting"]
    health.beat("worker")
    try:
        assert alice_api.get("/api/v2/jobs/fit/").json()["waiting"] == ""
    finally:
        health.forget("worker")
