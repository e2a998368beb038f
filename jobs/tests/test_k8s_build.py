# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Runtime images from requirements.txt built in the cluster by a kaniko Job (seed 001)."""

import threading

import pytest
from django.db import connection

from jobs.models import JobState

from .k8s_fixtures import cluster, k8s_dc, ns_of, wait_for  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
REQS = "paddlepaddle==2.6.2\nnumpy<2\n"


@pytest.fixture
def build_dc(k8s_dc, cluster):
    cluster.store.create("namespaces", None, {"metadata": {"name": "paddlecloud"}})
    cluster.store.create("secrets", "paddlecloud", {
        "metadata": {"name": "push"}, "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": '{"auths": {"registry.example.com": {"auth": "dTpw"}}}'}})
    k8s_dc.config = {**k8s_dc.config, "secrets_namespace": "paddlecloud",
                     "build": {"enabled": True, "registry": "registry.example.com/pc", "push_secret": "push"}}
    k8s_dc.save()
    return k8s_dc


def submit_with_requirements(user, name):
    from conftest import make_package
    from jobs.services import submit_job

    package = make_package(user, name, {"train.py": "print(1)\n", "requirements.txt": REQS}, datacenter="k8s")
    return submit_job(user, {"name": name, "datacenter": "k8s", "package": package, "entry": "python train.py",
                             "mode": "collective", "pservers": 0, "trainers": 1})


def launch_in_background(job):
    from jobs.tasks import launch_job

    def run():
        try:
            launch_job.run(job.pk)
        finally:
            connection.close()

    t = threading.Thread(target=run)
    t.start()
    return t


def test_the_runtime_image_is_built_once_and_used(alice, build_dc, cluster):
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    t = launch_in_background(job)
    wait_for(lambda: ("jobs", "fit-build") in cluster.objects_in(ns), 20, "the build Job")
    build = cluster.store.get("jobs", ns, "fit-build")
    args = build["spec"]["template"]["spec"]["containers"][0]["args"]
    image = next(a.split("=", 1)[1] for a in args if a.startswith("--destination="))
    assert image.startswith("registry.example.com/pc/paddlecloud-runtime:")
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    t.join(30)
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.message
    spec = cluster.store.get("jobs", ns, "fit-trainer")["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == image
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["PADDLECLOUD_RUNTIME_READY"] == "1" and spec["imagePullSecrets"] == [{"name": "fit-pull"}]
    second = submit_with_requirements(alice, "again")
    t = launch_in_background(second)
    t.join(30)
    second.refresh_from_db()
    assert second.state == JobState.STARTING and ("jobs", "again-build") not in cluster.objects_in(ns)


@pytest.mark.parametrize("job_marked_failed", [True, False], ids=["job-failed", "pod-failed-first"])
def test_a_failed_build_fails_the_job_with_the_build_log(alice, build_dc, cluster, job_marked_failed):
    """Whether the backend first sees the failed pod or the Job marked Failed (in a cluster
    the pod fails a moment before the Job controller says so), the log's end is reported."""
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    t = launch_in_background(job)
    wait_for(lambda: ("jobs", "fit-build") in cluster.objects_in(ns), 20, "the build Job")
    pod = cluster.run_job(ns, "fit-build")[0]
    cluster.log(ns, pod, "ERROR: No matching distribution found for paddlepaddle==2.6.2")
    cluster.pod_failed(ns, pod, exit_code=1)
    if job_marked_failed:
        cluster.job_condition(ns, "fit-build", "Failed", "BackoffLimitExceeded", "")
    t.join(30)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.reason == "RuntimeImageBuildFailed"
    assert "No matching distribution" in job.message
    wait_for(lambda: cluster.objects_in(ns) == [], 10, f"the build removed with the job: {cluster.objects_in(ns)}")
