"""CPU and memory of a job's pods from the cluster's metrics API (metrics.k8s.io PodMetrics,
served by metrics-server). A cluster without it answers 404: no usage, quietly."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from ...live.usage import Usage
from .client import Api
from .manifests import LABEL_JOB_ID
from .status import meta, replica_key

log = logging.getLogger(__name__)

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
# The metrics API is polled every sample: one quick try, never the client's retries, so a
# missing or slow metrics-server never holds the watch loop up.
TIMEOUT = (3, 5)
# A cluster that answered "no metrics API" is asked again only after this long.
ABSENT_RECHECK_SECONDS = 60.0
_absent_until: dict[str, float] = {}  # API server URL -> monotonic time to ask again


def pod_metrics(api: Api, namespace: str, job_id: int) -> list[dict[str, Any]]:
    """The PodMetrics of the job's pods; [] where the cluster has no metrics API."""
    server = api.client.configuration.host
    if time.monotonic() < _absent_until.get(server, 0.0):
        return []
    try:
        found = api.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "pods", label_selector=f"{LABEL_JOB_ID}={job_id}", _request_timeout=TIMEOUT)
    except ApiException as e:
        if e.status in (404, 503):  # not installed; installed but its server not ready
            log.debug("no pod metrics at %s: %s", server, e.status)
            _absent_until[server] = time.monotonic() + ABSENT_RECHECK_SECONDS
            return []
        raise
    items = found.get("items") if isinstance(found, dict) else None
    return items if isinstance(items, list) else []


def parse(metrics: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]) -> dict[tuple[str, int], Usage]:
    """Each replica's summed container usage, matched to `pods` (the watched ones) by name."""
    replicas: dict[str, tuple[str, int]] = {}
    for pod in pods:
        found = replica_key(pod)
        if found:
            replicas[meta(pod).get("name", "")] = (found[1], found[2])
    out: dict[tuple[str, int], Usage] = {}
    for item in metrics:
        key = replicas.get(meta(item).get("name", ""))
        containers = item.get("containers")
        if key is None or not isinstance(containers, list):
            continue
        try:
            cores = sum(parse_quantity(c["usage"]["cpu"]) for c in containers)  # type: ignore[no-untyped-call]  # kubernetes is untyped
            memory = sum(parse_quantity(c["usage"]["memory"]) for c in containers)  # type: ignore[no-untyped-call]  # kubernetes is untyped
        except (KeyError, TypeError, ValueError):
            continue  # a malformed object says nothing about the replica
        out[key] = Usage(memory_bytes=int(memory), cpu_percent=round(float(cores) * 100, 1))
    return out
