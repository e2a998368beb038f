# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Replica usage on Kubernetes: PodMetrics from the metrics API (metrics.k8s.io), served here
by a reaction in front of the emulated cluster in the form metrics-server gives, asked with the
permissions deploy/kubernetes/rbac.yaml grants; a cluster without the API (404), or one that
refuses it (403), gives no samples, no errors and no request storm; a hung one never holds the
watch loop up."""

import logging
import re

import kmock
import pytest

from jobs.backends.kubernetes import manifests
from jobs.backends.kubernetes.usage import parse
from jobs.live.usage import Usage
from jobs.models import ReplicaSample

from .k8s_fixtures import cluster, k8s_dc, launch, ns_of, part, submit  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

METRICS_PATH = re.compile(r"^/apis/metrics\.k8s\.io/v1beta1/(namespaces/[^/]+/)?pods")


def pod_metrics(name: str, cpu: str, memory: str, ns: str = "pc-alice") -> dict:
    """A PodMetrics as metrics-server returns it (two containers: the replica and a sidecar)."""
    return {"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-11-23T10:00:00Z",
                         "labels": {manifests.LABEL_ROLE: "trainer"}},
            "timestamp": "2026-11-23T10:00:00Z", "window": "10.004s",
            "containers": [{"name": "trainer", "usage": {"cpu": cpu, "memory": memory}},
                           {"name": "sidecar", "usage": {"cpu": "0", "memory": "1Mi"}}]}


def running_trainer(alice, cluster, part, name="fit") -> tuple:
    job = submit(alice, name, mode="collective", pservers=0, trainers=1)
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    part.until(lambda: ("jobs", manifests.trainer_name(job)) in cluster.objects_in(ns), what="the trainer Job")
    pod = cluster.run_job(ns, manifests.trainer_name(job))[0]
    cluster.pod_running(ns, pod)
    part.until(lambda: part.job(job).replicas.get().state == "Running", what="the trainer to run")
    return job, pod


def test_pod_metrics_become_each_replicas_usage(alice, cluster, part, settings):
    settings.USAGE_SAMPLE_SECONDS = 0
    served = {}

    async def metrics(request: kmock.Request):
        return {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
                "items": [pod_metrics(name, "250000000n", "200Mi", ns) for name, ns in served.items()]}

    cluster.kmock[kmock.method("GET"), METRICS_PATH] << metrics
    job, pod = running_trainer(alice, cluster, part)
    served[pod] = ns_of(job)
    sample = part.until(lambda: ReplicaSample.objects.filter(replica__job=job).last(), what="a usage sample")
    assert (sample.cpu_percent, sample.memory_bytes) == (25.0, 201 * 2**20)


def test_a_cluster_without_the_metrics_api_gives_no_usage_quietly(alice, cluster, part, settings, caplog):
    settings.USAGE_SAMPLE_SECONDS = 0
    asked = []

    async def absent(request: kmock.Request):
        asked.append(request)
        raise kmock.KubernetesError(404, "NotFound", "the server could not find the requested resource")

    cluster.kmock[kmock.method("GET"), METRICS_PATH] << absent
    job, _ = running_trainer(alice, cluster, part)
    with caplog.at_level(logging.WARNING):
        part.until(lambda: asked, what="the metrics API to be asked")
        for _ in range(5):
            part.tick()
    assert len(asked) == 1, "a cluster without the API is not asked again at once"
    assert not ReplicaSample.objects.filter(replica__job=job).exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_refused_metrics_api_is_asked_again_only_after_a_while_and_says_so_once(alice, cluster, part, settings,
                                                                                  caplog):
    """As on a cluster whose RBAC does not let the service account list PodMetrics."""
    settings.USAGE_SAMPLE_SECONDS = 0
    asked = []

    async def forbidden(request: kmock.Request):
        asked.append(request)
        raise kmock.KubernetesError(403, "Forbidden", 'pods.metrics.k8s.io is forbidden: User "x" cannot list')

    cluster.kmock[kmock.method("GET"), METRICS_PATH] << forbidden
    job, _ = running_trainer(alice, cluster, part)
    with caplog.at_level(logging.INFO):
        part.until(lambda: asked, what="the metrics API to be asked")
        for _ in range(20):
            part.part.next_full = 0  # every tick a full pass: every running job sampled
            part.tick()
    assert len(asked) == 1, "refused: not asked again at once"
    assert not ReplicaSample.objects.filter(replica__job=job).exists()
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "403" in said[0].getMessage() and not said[0].exc_info, said


def test_a_hung_metrics_api_never_holds_the_watch_loop_up(alice, cluster, part, settings):
    """Each sample waits on its own thread, with short timeouts: the loop's passes go on."""
    settings.USAGE_SAMPLE_SECONDS = 0
    empty = {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": []}
    with cluster.hang("GET", METRICS_PATH, empty) as asked:
        jobs = [running_trainer(alice, cluster, part, f"fit-{i}")[0] for i in range(3)]
        part.until(lambda: asked, what="the metrics API to be asked")
        passes = part.passes_in_thread(3, full=True)
        # A client that waits on a hung server blocks for its read timeout and retries (about 12 s
        # a job with the client's defaults); three passes over three jobs would take minutes.
        assert passes.wait(10), "the watch loop is stuck on the metrics API"
        assert all(part.job(j).state == "Running" for j in jobs)


def test_only_metrics_of_the_jobs_watched_pods_count_and_malformed_ones_are_skipped():
    pods = [{"metadata": {"name": "fit-trainer-0-x", "labels": {manifests.LABEL_JOB_ID: "7",
                                                                 manifests.LABEL_ROLE: "trainer",
                                                                 manifests.LABEL_INDEX: "0"}}},
            {"metadata": {"name": "fit-pserver-1", "labels": {manifests.LABEL_JOB_ID: "7",
                                                               manifests.LABEL_ROLE: "pserver",
                                                               manifests.LABEL_INDEX: "1"}}}]
    metrics = [pod_metrics("fit-trainer-0-x", "1500m", "1Gi"), pod_metrics("someone-elses", "4", "1Gi"),
               {**pod_metrics("fit-pserver-1", "1", "1Gi"), "containers": [{"name": "ps", "usage": {"cpu": "lots"}}]}]
    assert parse(metrics, pods) == {("trainer", 0): Usage(memory_bytes=2**30 + 2**20, cpu_percent=150.0)}
