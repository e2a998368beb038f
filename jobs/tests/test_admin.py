"""The operators' console: every model listed with its columns and filters; actions go through
the services."""

import pytest

from jobs import services
from jobs.models import Job
from tests.support import make_package

pytestmark = pytest.mark.django_db

PAGES = ["/admin/jobs/job/", "/admin/jobs/replica/", "/admin/jobs/jobevent/", "/admin/accounts/datacenter/",
         "/admin/accounts/registry/", "/admin/quotas/quota/", "/admin/accounts/registry/add/"]


@pytest.fixture
def admin_client(client, django_user_model, datacenter):
    django_user_model.objects.create_superuser("root", "root@example.com", "password")
    client.force_login(django_user_model.objects.get(username="root"))
    return client


@pytest.fixture
def job(alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    return services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})


@pytest.mark.parametrize("url", PAGES)
def test_admin_pages_render(admin_client, job, url):
    assert admin_client.get(url).status_code == 200


def test_job_detail_in_admin_shows_replicas_and_events(admin_client, job):
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "pserver" in page and "Submitted" in page


def test_the_kill_action_uses_the_service(admin_client, job):
    res = admin_client.post("/admin/jobs/job/", {"action": "kill_jobs", "_selected_action": [job.pk]})
    assert res.status_code == 302
    job.refresh_from_db()
    assert job.state == "Killed"
    assert job.events.filter(state="Killed").exists()


def test_deleting_in_admin_goes_through_the_service(admin_client, job):
    admin_client.post(f"/admin/jobs/job/{job.pk}/delete/", {"post": "yes"})
    assert Job.objects.get(pk=job.pk).deleting  # cleanup continues in the background task


def test_the_admin_is_branded_paddlecloud(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert "<title>PaddleCloud | PaddleCloud administration</title>" in page
    assert "Django administration" not in page


def test_replicas_and_events_are_read_only(admin_client, job):
    replica, event = job.replicas.first(), job.events.first()
    for url in [f"/admin/jobs/replica/{replica.pk}/change/", f"/admin/jobs/jobevent/{event.pk}/change/"]:
        page = admin_client.get(url)
        assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
        assert admin_client.post(url, {"state": "Failed", "reason": "edited"}).status_code == 403
    for url in ["/admin/jobs/replica/add/", "/admin/jobs/jobevent/add/"]:
        assert admin_client.get(url).status_code == 403
    replica.refresh_from_db()
    assert replica.reason != "edited"


def test_a_finished_job_is_read_only_and_still_deletable(admin_client, job):
    url = f"/admin/jobs/job/{job.pk}/change/"
    assert 'name="_save"' in admin_client.get(url).content.decode()  # its fields all read-only (test_admin_hostile)
    services.kill_job(job)
    page = admin_client.get(url).content.decode()
    assert 'name="_save"' not in page and "/delete/" in page
    assert admin_client.post(url, {"passes": 99}).status_code == 403
