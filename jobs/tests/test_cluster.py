"""The cluster page and API: capacity and use per datacenter, the running jobs and the queue in
order with reasons; another user's job is its owner and resources only; staff see all and act."""

import pytest

from jobs import services
from jobs.models import Job, JobState
from tests.support import make_package, token_client

pytestmark = pytest.mark.django_db


def submit(user, name, state, position=None, reason="", message="", **fields):
    pkg = make_package(user, name, {"train.py": ""})
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py",
                                     "mode": "collective", "trainers": 2, "cpu": "2", "memory": "4Gi", **fields})
    Job.objects.filter(pk=job.pk).update(state=state, queue_position=position, reason=reason, message=message)
    return job


@pytest.fixture
def cluster(alice, bob, datacenter):
    datacenter.capacity_cpu_millicores, datacenter.capacity_memory_bytes = 16000, 64 * 2**30
    datacenter.capacity_gpus = 0
    datacenter.save()
    submit(alice, "alice-run", JobState.RUNNING, reason="Running")
    submit(bob, "secret-experiment", JobState.RUNNING, message="bob's private words")
    submit(bob, "bob-second", JobState.QUEUED, 2, "NoCapacity", "needs 4 CPU, 0 free in datacenter local")
    submit(alice, "alice-wait", JobState.QUEUED, 1, "QuotaFull", "2 of 2 running jobs used (quota)")
    submit(alice, "alice-done", JobState.SUCCEEDED)


def test_the_api_shows_capacity_use_running_jobs_and_the_queue_in_order(alice, cluster):
    [dc] = token_client(alice).get("/api/v2/cluster/").json()
    assert dc["name"] == "local" and dc["capacity"] == {"cpu_millicores": 16000, "memory_bytes": 64 * 2**30, "gpus": 0}
    assert dc["used"] == {"cpu_millicores": 8000, "memory_bytes": 16 * 2**30, "gpus": 0}  # the two running jobs
    assert [j["name"] for j in dc["running"]] == ["alice-run", None]
    assert [(j["queue_position"], j["owner"], j["name"]) for j in dc["queue"]] == [(1, "alice", "alice-wait"),
                                                                                  (2, "bob", None)]
    mine, theirs = dc["queue"]
    assert mine["reason"] == "QuotaFull" and mine["message"] == "2 of 2 running jobs used (quota)"
    assert theirs["reason"] is None and theirs["message"] is None and not theirs["mine"]
    assert theirs["resources"] == {"cpu_millicores": 4000, "memory_bytes": 8 * 2**30, "gpus": 0}


def test_another_users_job_shows_as_owner_and_resources_only(client, alice, cluster):
    client.force_login(alice)
    page = client.get("/cluster/").content.decode()
    assert "alice-run" in page and "alice-wait" in page and "2 of 2 running jobs used" in page
    assert "secret-experiment" not in page and "bob-second" not in page and "private words" not in page
    assert "needs 4 CPU" not in page and "bob" in page and "4 CPU · 8.0 GiB" in page
    assert "8 of 16 held" in page and "16.0 GiB of 64.0 GiB held" in page
    assert "/cluster/jobs/" not in page  # no actions for users
    assert "alice-done" not in page  # ended: neither running nor queued
    refresh = client.get("/cluster/", headers={"HX-Request": "true"})
    assert refresh.templates[0].name == "jobs/_cluster.html"


def test_staff_see_every_job_and_can_kill_one(client, alice, bob, staff, cluster):
    secret = Job.objects.get(name="secret-experiment")
    client.force_login(alice)
    assert client.post(f"/cluster/jobs/{secret.pk}/kill/").status_code == 302
    assert Job.objects.get(pk=secret.pk).state == JobState.RUNNING  # a user cannot
    client.force_login(staff)
    page = client.get("/cluster/").content.decode()
    assert "secret-experiment" in page and "bob-second" in page and "needs 4 CPU" in page
    assert f"/cluster/jobs/{secret.pk}/kill/" in page
    res = client.post(f"/cluster/jobs/{secret.pk}/kill/", follow=True)
    assert "Job secret-experiment of bob is being killed." in res.content.decode()
    secret.refresh_from_db()
    assert secret.state == JobState.KILLED and secret.message == "killed by staff (staff)"
    [dc] = token_client(staff).get("/api/v2/cluster/").json()
    assert {j["name"] for j in dc["queue"]} == {"alice-wait", "bob-second"}
