"""The small things a first user tripped over (issue 22): each one as that user met it."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from jobs import services
from jobs.models import Job, JobState
from jobs.state.transitions import transition
from tests.support import make_package, token_client

from .test_pages import FORM

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(client, alice):
    client.force_login(alice)
    return client


def submit(user, name="fit", **fields):
    pkg = make_package(user, name, {"train.py": ""})
    return services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", **fields})


def test_a_filter_that_matches_nothing_does_not_say_there_are_no_jobs(web, alice):
    assert "No jobs yet" in web.get("/jobs/").content.decode()
    submit(alice)
    for query in ("?name=nothing-like-it", "?state=Failed", "?active=false"):
        for headers in ({}, {"HX-Request": "true"}):  # the page and its rows' refresh
            page = web.get(f"/jobs/{query}", headers=headers).content.decode()
            assert "No job matches these filters" in page and "No jobs yet" not in page
    assert "No job matches" not in web.get("/jobs/?sort=name").content.decode()


def test_counts_are_written_as_english(alice):
    one = submit(alice, "one", mode="ps", pservers=1, trainers=1)
    assert one.events.get(reason="Submitted").message == "1 pserver, 1 trainer"
    many = submit(alice, "many", mode="collective", trainers=4)
    assert many.events.get(reason="Submitted").message == "4 trainers"


def test_every_bad_environment_variable_is_reported_at_once(alice, web):
    api = token_client(alice)
    pkg = make_package(alice, "fit", {"train.py": ""})
    res = api.post("/api/v2/jobs/", {"name": "fit", "package": pkg, "entry": "python train.py",
                                     "env": {"1BAD": "x", "ALSO-BAD": "y", "PADDLE_PORT": "1", "OK": "z"}},
                   format="json")
    assert res.status_code == 400
    [message] = res.json()["env"]
    assert "'1BAD' is not a valid" in message and "'ALSO-BAD' is not a valid" in message
    assert "PADDLE_PORT is set by PaddleCloud" in message
    files = [SimpleUploadedFile("train.py", b"")]
    res = web.post("/jobs/new/", {**FORM, "env": "A=1\nno equals\nB=2\nnor here", "files": files})
    assert res.context["form"].errors["env"] == ["line 2: write NAME=value", "line 4: write NAME=value"]


def test_a_name_over_the_limit_is_refused_not_cut_short(web):
    page = web.get("/jobs/new/").content.decode()
    name_input = page[page.index('name="name"') - 200:page.index('name="name"') + 200]
    assert "maxlength" not in name_input
    files = [SimpleUploadedFile("train.py", b"")]
    res = web.post("/jobs/new/", {**FORM, "name": "a" * 41, "files": files})
    assert "at most 40 characters" in res.context["form"].errors["name"][0]
    assert not Job.objects.exists()


def test_a_purged_jobs_page_says_where_its_metrics_went(web, alice):
    job = submit(alice)
    transition(job, JobState.SUCCEEDED, "Completed", "the trainer exited 0")
    Job.objects.filter(pk=job.pk).update(purged=timezone.now())
    page = web.get("/jobs/fit/").content.decode()
    assert "No metric lines yet" not in page and "The metric lines went with the logs" in page


def test_endpoints_do_not_wrap_in_the_replica_table(web, alice):
    job = submit(alice)
    job.replicas.filter(role="trainer").update(host="10.244.101.23", port=36001)
    assert '<code class="endpoint">10.244.101.23:36001</code>' in web.get("/jobs/fit/").content.decode()


def test_the_404_page_keeps_the_navigation(web, client):
    res = web.get("/jobs/no-such-job/")
    page = res.content.decode()
    assert res.status_code == 404 and "Not found" in page
    assert 'href="/jobs/"' in page and 'href="/files/' in page and "Log out" in page  # the site's header
    web.logout()
    anonymous = client.get("/no/such/page/")
    assert anonymous.status_code == 404 and 'href="/login/"' in anonymous.content.decode()


def test_the_admin_quota_form_takes_what_its_list_shows(admin_client, datacenter):
    from quotas.models import Quota

    quota = Quota.objects.get(datacenter=datacenter, user=None)
    form = admin_client.get(f"/admin/quotas/quota/{quota.pk}/change/").content.decode()
    assert 'value="32Gi"' in form and 'value="100Gi"' in form and 'name="cpu" value="8"' in form
    res = admin_client.post(f"/admin/quotas/quota/{quota.pk}/change/", {
        "datacenter": datacenter.pk, "user": "", "cpu": "16", "memory": "64Gi", "gpus": 0, "max_running_jobs": 5,
        "max_queued_jobs": 200, "storage": "1Ti", "max_priority": 10})
    assert res.status_code == 302, res.content.decode()[-2000:]
    quota.refresh_from_db()
    assert (quota.cpu_millicores, quota.memory_bytes, quota.storage_bytes) == (16_000, 64 * 2**30, 2**40)
    assert quota.max_queued_jobs == 200
    assert "64.0 GiB" in admin_client.get("/admin/quotas/quota/").content.decode()
    bad = admin_client.post(f"/admin/quotas/quota/{quota.pk}/change/", {
        "datacenter": datacenter.pk, "user": "", "cpu": "lots", "memory": "64", "gpus": 0, "max_running_jobs": 5,
        "max_queued_jobs": 200, "storage": "1Ti", "max_priority": 10})
    assert "is not a CPU amount" in bad.content.decode()


def test_the_admin_index_leaves_out_internal_tables(admin_client):
    index = admin_client.get("/admin/").content.decode()
    assert "/admin/quotas/quota/" in index and "/admin/accounts/apitoken/" in index
    for internal in ("/admin/knox/", "/admin/axes/"):
        assert internal not in index
