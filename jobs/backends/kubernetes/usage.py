"""CPU and memory of a datacenter's pods from the cluster's metrics API (metrics.k8s.io
PodMetrics, served by metrics-server), sampled by a thread of the watcher's own, never by the
watch loop: one list of every pod of the datacenter per sample, asked only when some job's
usage was asked for (Backend.usage reads the latest sample and never waits).

Each request is one quick try (short timeouts, none of the client's retries). A cluster that
answers "no metrics API here" (404, 503: not installed or not ready; 403: the service account may
not list them) or does not answer is asked again only after a while, and that is logged once
per change, not at every try.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from ...live.usage import Usage
from .client import Api
from .manifests import LABEL_DATACENTER, LABEL_JOB
from .status import meta, replica_key

log = logging.getLogger(__name__)
Obj = dict[str, Any]
GROUP, VERSION = "metrics.k8s.io", "v1beta1"
TIMEOUT = (3, 5)
MIN_INTERVAL_SECONDS = 1.0  # at most one list a second, however often usage is asked for
# After "no metrics API here" (or no answer), ask again only after this long.
BACKOFF_SECONDS = {403: 300.0, 404: 60.0, 503: 60.0, None: 30.0}


class UsageSampler(threading.Thread):
    """The PodMetrics of one datacenter's pods, listed when asked for and kept by pod name."""

    def __init__(self, api: Api, stop: threading.Event):
        super().__init__(name="k8s-usage", daemon=True)
        self.client = api.one_try_client()
        self.custom = client.CustomObjectsApi(self.client)
        self.selector = f"{LABEL_JOB},{LABEL_DATACENTER}={api.settings.datacenter}"
        self.stop_event = stop
        self.wanted = threading.Event()
        self.lock = threading.Lock()
        self.metrics: dict[tuple[str, str], Obj] = {}  # (namespace, pod name) -> PodMetrics
        self.next_at = 0.0
        self.trouble: int | str | None = None  # what the last failed list said, until one succeeds

    def want(self) -> None:
        """Someone asked for usage: take a sample unless one was taken just now."""
        self.wanted.set()

    def latest(self) -> dict[tuple[str, str], Obj]:
        self.want()
        with self.lock:
            return self.metrics

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if not self.wanted.wait(1.0):
                    continue
                wait = self.next_at - time.monotonic()
                if wait > 0:
                    self.stop_event.wait(wait)
                    continue
                self.wanted.clear()
                self.next_at = time.monotonic() + self.sample()
        finally:
            self.client.close()  # type: ignore[no-untyped-call]  # kubernetes' ApiClient is untyped

    def sample(self) -> float:
        """List the datacenter's PodMetrics; how long to wait before the next list."""
        try:
            found = self.custom.list_cluster_custom_object(GROUP, VERSION, "pods", label_selector=self.selector,
                                                           _request_timeout=TIMEOUT)
        except ApiException as e:
            status = e.status if e.status in BACKOFF_SECONDS else None
            self._say(status, f"the metrics API answered {e.status} {e.reason}: no CPU and memory usage")
            return BACKOFF_SECONDS[status]
        except Exception as e:  # noqa: BLE001 - no answer (timeout, connection): no usage for now
            self._say("unreachable", f"the metrics API did not answer ({type(e).__name__}): no CPU and memory usage")
            return BACKOFF_SECONDS[None]
        if self.trouble is not None:
            log.info("the metrics API answers again")
            self.trouble = None
        items = found.get("items") if isinstance(found, dict) else None
        with self.lock:
            self.metrics = {(meta(i).get("namespace", ""), meta(i).get("name", "")): i
                            for i in items if isinstance(i, dict)} if isinstance(items, list) else {}
        return MIN_INTERVAL_SECONDS

    def _say(self, trouble: int | str | None, message: str) -> None:
        if trouble != self.trouble:
            level = logging.WARNING if trouble == 403 else logging.INFO
            log.log(level, "%s%s", message, "; the service account may not list pods.metrics.k8s.io "
                                             "(deploy/kubernetes/rbac.yaml grants it)" if trouble == 403 else "")
            self.trouble = trouble
        with self.lock:
            self.metrics = {}


def pod_usage(sampler: UsageSampler, pods: Iterable[Obj]) -> dict[tuple[str, int], Usage]:
    """Each of `pods`' replicas' latest usage (the job's watched pods: the sample is of all)."""
    metrics = sampler.latest()
    return parse((m for p in pods if (m := metrics.get((meta(p).get("namespace", ""), meta(p).get("name", ""))))),
                 pods)


def parse(metrics: Iterable[Obj], pods: Iterable[Obj]) -> dict[tuple[str, int], Usage]:
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
