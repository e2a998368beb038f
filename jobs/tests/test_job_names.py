"""Job names as seed 004 allows them (letters, digits, '-' and '.'; no '_'; ending with a letter or
digit): shown as typed on every surface, reachable at their URLs, and mapped to Kubernetes names
that never collide (MyJob, myjob, my.job and my-job may all coexist)."""

import re

import pytest
from django.core.exceptions import ValidationError

from jobs import services, spec
from jobs.live import logstore
from jobs.models import Job
from tests.support import make_package

pytestmark = pytest.mark.django_db

SEED_NAMES = ["my.job", "MyJob", "my-paddlecloud-job", "paddle-cluster-job", "v1.2.3", "A" + "b.C" * 13]
LOOKALIKES = ["MyJob", "myjob", "my.job", "my-job", "My.Job", "MY-JOB"]


@pytest.fixture
def pkg(alice):
    return make_package(alice, "fit", {"train.py": ""})


def submit(user, pkg, name):
    small = {"cpu": "100m", "pscpu": "100m", "memory": "64Mi", "psmemory": "64Mi"}  # many fit the default quota
    return services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", **small})


def test_k8s_names_are_dns_labels_and_the_name_itself_when_it_already_is_one():
    assert spec.k8s_name("fit-a-line") == "fit-a-line"
    for name in SEED_NAMES + LOOKALIKES:
        k8s = spec.k8s_name(name)
        assert len(k8s) <= spec.NAME_MAX and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", k8s), (name, k8s)
        assert spec.k8s_name(name) == k8s  # stable: launch, kill and reconcile find the same objects
    assert len({spec.k8s_name(n) for n in LOOKALIKES}) == len(LOOKALIKES)


@pytest.mark.parametrize("name", SEED_NAMES)
def test_seed_names_are_accepted_and_kept_as_typed(alice, pkg, name):
    job = submit(alice, pkg, name)
    assert Job.objects.get(pk=job.pk).name == name


def test_lookalike_names_coexist_with_distinct_cluster_names(alice, pkg, datacenter):
    datacenter.quotas.update(max_running_jobs=len(LOOKALIKES))
    jobs = [submit(alice, pkg, name) for name in LOOKALIKES]
    assert len({j.k8s_name for j in jobs}) == len(LOOKALIKES)
    assert sorted(Job.objects.values_list("name", flat=True)) == sorted(LOOKALIKES)


def test_a_name_whose_cluster_name_is_taken_is_refused(alice, pkg):
    first = submit(alice, pkg, "fit")
    Job.objects.filter(pk=first.pk).update(k8s_name=spec.k8s_name("Fit"))  # as if the hashes collided
    with pytest.raises(ValidationError) as exc:
        submit(alice, pkg, "Fit")
    assert "same cluster name" in exc.value.message_dict["name"][0]


@pytest.mark.parametrize("name", ["My.Job", "fit.json"])  # not read as a ".json" format suffix
def test_api_routes_take_names_with_dots_and_capitals(alice_api, pkg, name):
    res = alice_api.post("/api/v2/jobs/", {"name": name, "package": pkg, "entry": "python train.py"}, format="json")
    assert res.status_code == 201, res.json()
    assert res.json()["name"] == name and res.json()["k8s_name"] == spec.k8s_name(name)
    assert alice_api.get(f"/api/v2/jobs/{name}/").json()["name"] == name
    assert alice_api.get(f"/api/v2/jobs/{name.upper()}/").status_code == 404  # names are case-sensitive
    assert [r["replica"] for r in alice_api.get(f"/api/v2/jobs/{name}/logs/").json()] == ["pserver-0", "trainer-0"]
    assert alice_api.post(f"/api/v2/jobs/{name}/kill/").json()["state"] == "Killed"
    assert alice_api.delete(f"/api/v2/jobs/{name}/").status_code == 204


def test_pages_take_names_with_dots_and_capitals(client, alice, pkg):
    client.force_login(alice)
    job = submit(alice, pkg, "My.Job")
    logstore.append(job.replicas.get(role="trainer"), b"hello\n")
    assert "My.Job" in client.get("/jobs/").content.decode()
    assert "My.Job" in client.get("/jobs/My.Job/").content.decode()
    assert "hello" in client.get("/jobs/My.Job/logs/trainer-0/").content.decode()
    assert client.get("/jobs/My.Job/metrics/").status_code == 200
    assert client.post("/jobs/My.Job/kill/").status_code == 302
    assert Job.objects.get().state == "Killed"
    assert client.post("/jobs/My.Job/delete/").status_code == 302
    assert client.get("/jobs/My.Job/").status_code == 404
