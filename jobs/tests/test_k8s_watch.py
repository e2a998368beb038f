# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""The watcher's Kubernetes part against the emulated cluster, the tests playing the cluster:
pods appearing and changing phase, image pull failures, unschedulable pods, crash loops, failed
mounts, watch streams dropping and 410 Gone."""

import pytest

from jobs import logstore
from jobs.models import JobState, ReplicaState

from .k8s_fixtures import cluster, k8s_dc, launch, part, submit  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def replicas(job):
    return {r.name: r for r in job.replicas.all()}


def start_pservers(cluster, part, job, ns):
    pods = cluster.run_statefulset(ns, f"{job.name}-pserver")
    for pod in pods:
        cluster.pod_running(ns, pod)
    cluster.statefulset_ready(ns, f"{job.name}-pserver", job.pservers)
    part.until(lambda: cluster.store.find("jobs", ns), what="the trainer Job")
    return pods


def test_ps_job_runs_in_order_and_succeeds_leaving_nothing(alice, cluster, part):
    job = submit(alice, "fit")
    launch(job)
    ns = part.part and job.datacenter and __import__("jobs.backends.base", fromlist=["x"]).get_backend(
        job.datacenter).namespace(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    part.tick()
    assert not cluster.store.find("jobs", ns), "trainers must wait for the pservers"
    r = replicas(part.job(job))
    assert r["trainer-0"].reason == "WaitingForPservers"
    ps = cluster.run_statefulset(ns, "fit-pserver")
    cluster.pod_running(ns, ps[0])
    cluster.pod_running(ns, ps[1], ready=False)
    cluster.statefulset_ready(ns, "fit-pserver", 1)
    part.until(lambda: replicas(job)["pserver-1"].state == ReplicaState.RUNNING, what="pservers running")
    assert not cluster.store.find("jobs", ns), "one pserver is not ready yet"
    cluster.statefulset_ready(ns, "fit-pserver", 2)
    part.until(lambda: cluster.store.find("jobs", ns), what="the trainer Job")
    trainers = cluster.run_job(ns, "fit-trainer")
    cluster.log(ns, ps[0], "pserver listening")
    for pod in trainers:
        cluster.pod_running(ns, pod)
        cluster.log(ns, pod, f"{pod} step 1", "loss 0.5")
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
    for pod in trainers:
        cluster.log(ns, pod, "done")
        cluster.pod_succeeded(ns, pod)
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded")
    part.until(lambda: cluster.objects_in(ns) == [], what="everything deleted")
    t0 = job.replicas.get(role="trainer", index=0)
    assert logstore.read(t0).text == f"{trainers[0]} step 1\nloss 0.5\ndone\n"
    assert "pserver listening" in logstore.read(job.replicas.get(role="pserver", index=0)).text
    r = replicas(part.job(job))
    assert r["trainer-1"].state == ReplicaState.SUCCEEDED and r["pserver-0"].state == ReplicaState.TERMINATED
