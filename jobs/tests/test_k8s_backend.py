# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""The kubernetes backend driven through the official client over HTTP against the emulated
cluster: launch order, idempotency, faults, stop and delete."""

import pytest

from jobs import manifests
from jobs.backends.base import get_backend
from jobs.models import JobState

from .k8s_fixtures import cluster, k8s_dc, launch, submit  # noqa: F401

pytestmark = pytest.mark.django_db


def ns_of(job):
    return get_backend(job.datacenter).namespace(job)


def test_launch_creates_pservers_first_with_owner_references(alice, k8s_dc, cluster):
    job = submit(alice, "fit")
    launch(job)
    assert job.state == JobState.STARTING, job.message
    ns = ns_of(job)
    assert ns.startswith("paddle-alice-") and ns in cluster.namespaces()
    quota = cluster.store.get("resourcequotas", ns, "paddlecloud-quota")
    assert quota["spec"]["hard"]["limits.cpu"] == "64000m"
    root = cluster.store.get("configmaps", ns, "fit")
    assert cluster.objects_in(ns) == [("configmaps", "fit"), ("services", "fit-pserver"), ("services", "fit-trainer"),
                                      ("statefulsets", "fit-pserver")]
    for plural, name in cluster.objects_in(ns):
        obj = cluster.store.get(plural, ns, name)
        assert obj["metadata"]["labels"][manifests.LABEL_JOB] == "fit"
        if name != "fit":
            assert obj["metadata"]["ownerReferences"][0]["uid"] == root["metadata"]["uid"]
    hosts = {(r.role, r.index): (r.host, r.port) for r in job.replicas.all()}
    assert hosts[("pserver", 1)] == (f"fit-pserver-1.fit-pserver.{ns}.svc", 7164)
    assert hosts[("trainer", 0)] == (f"fit-trainer-0.fit-trainer.{ns}.svc", 8500)
