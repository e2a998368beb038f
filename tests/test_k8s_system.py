# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""The whole service on a Kubernetes datacenter: jobs submitted through /api/v2 (what the form
and paddlectl use) are launched by a real Celery worker and followed by the watcher, against the
emulated cluster; the test plays the controllers and kubelets."""

import pytest
from django.test import Client

from jobs.backends.kubernetes import informer as k8s_informer
from jobs.models import Job, JobState
from jobs.tests.k8s_fixtures import cluster, k8s_dc, ns_of  # noqa: F401
from tests.support import make_package, running_system, wait_for


@pytest.fixture
def k8s_system(cluster, k8s_dc, transactional_db):
    try:
        with running_system():
            yield cluster
    finally:
        k8s_informer.stop_all()


def submit(api, user, **fields):
    package = make_package(user, "fit", {"train.py": "print('training')\n"}, datacenter="k8s")
    data = {"name": "fit", "datacenter": "k8s", "package": package, "entry": "python train.py",
            "pservers": 2, "trainers": 2, "passes": 2, **fields}
    resp = api.post("/api/v2/jobs/", data, format="json")
    assert resp.status_code == 201, resp.content
    return Job.objects.get(user=user, name="fit")


def state(job):
    job.refresh_from_db()
    return job.state


def test_fit_a_line_shape_through_the_api_to_succeeded(alice, alice_api, k8s_system):
    cluster = k8s_system
    job = submit(alice_api, alice)
    ns = ns_of(job)
    wait_for(lambda: ("statefulsets", "fit-pserver") in cluster.objects_in(ns), 20, "the pservers")
    ps = cluster.run_statefulset(ns, "fit-pserver")
    for pod in ps:
        cluster.pod_running(ns, pod)
        cluster.log(ns, pod, "pserver: listening on 7164")
    cluster.statefulset_ready(ns, "fit-pserver", 2)
    wait_for(lambda: ("jobs", "fit-trainer") in cluster.objects_in(ns), 20, "the trainers after ready pservers")
    trainers = cluster.run_job(ns, "fit-trainer")
    cluster.pod_waiting(ns, trainers[1], "ErrImagePull", "manifest unknown")
    cluster.pod_running(ns, trainers[0])
    wait_for(lambda: alice_api.get("/api/v2/jobs/fit/").json()["reason"] == "ErrImagePull", 20, "the job's reason")
    detail = alice_api.get("/api/v2/jobs/fit/").json()
    t1 = next(r for r in detail["replicas"] if r["name"] == "trainer-1")
    assert (t1["state"], t1["reason"], t1["message"]) == ("Pending", "ErrImagePull", "manifest unknown")
    assert t1["host"].startswith("fit-trainer-1.fit-trainer.") and t1["port"] == 8500
    browser = Client()
    browser.force_login(alice)
    page = browser.get("/jobs/fit/")
    assert b"ErrImagePull" in page.content and trainers[1].encode() in page.content
    cluster.pod_running(ns, trainers[1])
    for pod in trainers:
        cluster.log(ns, pod, 'PADDLECLOUD_METRIC {"step": 1, "loss": 0.5}')
        cluster.pod_succeeded(ns, pod)
    wait_for(lambda: state(job) == JobState.SUCCEEDED, 20, "Succeeded")
    wait_for(lambda: cluster.objects_in(ns) == [], 20, "pservers and everything else deleted")
    logs = alice_api.get("/api/v2/jobs/fit/logs/?replica=pserver-1&offset=0").json()
    assert "pserver: listening on 7164" in logs[0]["text"]


def test_kill_through_the_api_leaves_nothing_in_the_namespace(alice, alice_api, k8s_system):
    cluster = k8s_system
    job = submit(alice_api, alice, mode="collective", pservers=0, trainers=3)
    ns = ns_of(job)
    wait_for(lambda: ("jobs", "fit-trainer") in cluster.objects_in(ns), 20, "the trainers")
    for pod in cluster.run_job(ns, "fit-trainer"):
        cluster.pod_running(ns, pod)
    wait_for(lambda: state(job) == JobState.RUNNING, 20, "Running")
    assert alice_api.post("/api/v2/jobs/fit/kill/").status_code in (200, 202)
    wait_for(lambda: cluster.objects_in(ns) == [], 20, "nothing left")
    wait_for(lambda: all(r.state == "Terminated" for r in job.replicas.all()), 20, "replicas terminated")
    assert alice_api.delete("/api/v2/jobs/fit/").status_code in (200, 202, 204)
    wait_for(lambda: not Job.objects.filter(pk=job.pk).exists(), 20, "the job deleted")
