"""A queued job's position and reason, where its user looks: the API, the job page, the job list
and the legacy /api/v1 job list the old client reads."""

import pytest

from jobs import services
from jobs.lifecycle.queue import admit
from quotas.models import Quota
from tests.support import make_package

pytestmark = pytest.mark.django_db

REASON = "1 of 1 running jobs used (quota)"


@pytest.fixture
def waiting(alice, datacenter):
    """alice's 'first' holds her only running-job slot; 'second' waits first in the queue."""
    Quota.objects.create(datacenter=datacenter, user=alice, max_running_jobs=1)
    pkg = make_package(alice, "pkg", {"train.py": ""})
    for name in ("first", "second"):
        services.submit_job(alice, {"name": name, "package": pkg, "entry": "python train.py", "mode": "collective"})
    admit(datacenter)


def test_the_api_gives_the_position_and_the_reason(alice_api, waiting):
    jobs = {j["name"]: j for j in alice_api.get("/api/v2/jobs/").json()["results"]}
    assert (jobs["second"]["state"], jobs["second"]["queue_position"], jobs["second"]["message"]) == (
        "Queued", 1, REASON)
    assert jobs["first"]["queue_position"] is None
    assert alice_api.get("/api/v2/jobs/second/").json()["queue_position"] == 1


def test_the_job_page_and_the_job_list_show_the_position_and_the_reason(client, alice, waiting):
    client.force_login(alice)
    page = client.get("/jobs/second/").content.decode()
    assert "#1 in the queue of local" in page and REASON in page
    rows = client.get("/jobs/").content.decode()
    assert '<span class="queue-position" title="1 of 1 running jobs used (quota)">#1</span>' in rows
    assert "#1 in the queue" not in client.get("/jobs/first/").content.decode()


def test_the_legacy_job_list_gives_a_queued_job_a_suspended_condition_with_the_reason(alice_api, waiting):
    items = {i["metadata"]["name"]: i for i in alice_api.get("/api/v1/jobs/").json()["items"]}
    assert items["first-trainer"]["status"]["conditions"] is None
    [condition] = items["second-trainer"]["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"], condition["message"]) == (
        "Suspended", "True", "QuotaFull", f"position 1 in the queue: {REASON}")


def test_the_admin_shows_and_sets_the_capacity_the_queue_admits_against(client, django_user_model, datacenter):
    django_user_model.objects.create_superuser("root", "root@example.com", "password")
    client.force_login(django_user_model.objects.get(username="root"))
    url = f"/admin/accounts/datacenter/{datacenter.pk}/change/"
    assert "1000 CPU, 1.0 TiB memory, 64 GPU" in client.get(url).content.decode()
    res = client.post(url, {"name": "local", "backend": "local", "description": "", "config": "{}", "kubeconfig": "",
                            "capacity_cpu_millicores": "4000", "capacity_memory_bytes": "", "capacity_gpus": "",
                            "default_max_restarts": "3"})
    assert res.status_code == 302, res.content.decode()[:2000]
    datacenter.refresh_from_db()
    assert (datacenter.capacity_cpu_millicores, datacenter.capacity_memory_bytes, datacenter.capacity_gpus) == (
        4000, None, None)
    assert "4 CPU," in client.get(url).content.decode()
