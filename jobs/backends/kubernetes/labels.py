"""Each of our pods gets its index label (`paddlecloud/index`, for `kubectl get pods -l`: a pod
template cannot carry a per-pod label), once per pod, from a thread of the watcher's own, never
from the watch loop. A job's status waits on none of these requests: a hundred jobs starting at
once ask for four hundred, and while they went out one after another from the loop, an API
server slow to answer them held every other job's status back (the start lag that
bench/k8s_status_sync.py reports; docs/operating/performance.md).

Each request is one quick try (short timeouts, none of the client's retries): a label is a
convenience, not a duty, and a pod that could not be labelled stays so.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable
from typing import Any

from kubernetes import client

from .client import MERGE_PATCH, Api
from .manifests import LABEL_INDEX
from .status import meta, replica_key

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TIMEOUT = (3, 5)


class PodLabeller(threading.Thread):
    """Labels the pods `consider` hands it, in the order handed, until `stop` is set."""

    def __init__(self, api: Api, stop: threading.Event):
        super().__init__(name="k8s-labels", daemon=True)
        self.client = api.one_try_client()
        self.core = client.CoreV1Api(self.client)
        self.stop_event = stop
        self.pending: queue.SimpleQueue[tuple[str, str, int]] = queue.SimpleQueue()  # (namespace, pod, index)
        self.handed: dict[int, set[str]] = {}  # job id -> uids of its pods handed over (the watch loop's alone)

    def consider(self, pods: Iterable[Obj], ns: str) -> None:
        """Hand over each of a job's pods (in namespace `ns`) that has no index label yet, once.
        Called by the watch loop; never waits."""
        for pod in pods:
            key, md = replica_key(pod), meta(pod)
            uid = md.get("uid")
            if key is None or not uid or LABEL_INDEX in (md.get("labels") or {}):
                continue
            handed = self.handed.setdefault(key[0], set())
            if uid not in handed:
                handed.add(uid)
                self.pending.put((ns, md["name"], key[2]))

    def forget(self, job_id: int) -> None:
        """The job is done with: its pods are gone."""
        self.handed.pop(job_id, None)

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                try:
                    ns, name, index = self.pending.get(timeout=1.0)
                except queue.Empty:
                    continue
                self.label(ns, name, index)
        finally:
            self.client.close()  # type: ignore[no-untyped-call]  # kubernetes' ApiClient is untyped

    def label(self, ns: str, name: str, index: int) -> None:
        try:
            self.core.patch_namespaced_pod(name, ns, body={"metadata": {"labels": {LABEL_INDEX: str(index)}}},
                                           _content_type=MERGE_PATCH, _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001 - a label is a convenience, not a duty
            log.debug("pod %s/%s: cannot label: %s", ns, name, e)
