"""Each replica's status from the watched pods and workloads of a job (the watcher's in-memory
state, no API call): the newest pod of each replica, what deleted pods said last, what the
trainer Job and the pserver StatefulSet report for replicas that have no pod."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ...models import TERMINAL_STATES, Job, ReplicaState
from ..base import ReplicaStatus
from . import manifests
from .status import meta, parse_time, pod_status, ready_replicas, replica_key, workload_failure
from .watch import JOB, POD, STATEFULSET, ClusterState


def created(obj: dict[str, Any]) -> datetime:
    return parse_time(meta(obj).get("creationTimestamp")) or datetime.min.replace(tzinfo=UTC)


def observe_job(state: ClusterState, job: Job, ns: str) -> dict[tuple[str, int], ReplicaStatus]:
    """Each replica's status from the watched pods and workloads of `job`."""
    live, gone = state.pods_of(job.pk)
    wanted = {("pserver", i) for i in range(job.pservers)} | {("trainer", i) for i in range(job.trainers)}
    ended = job.state in TERMINAL_STATES
    newest: dict[tuple[str, int], tuple[dict[str, Any], ReplicaStatus]] = {}
    for pod in live:
        key = replica_key(pod)
        if not key or key[1:] not in wanted:
            continue
        status = pod_status(pod, key[1], warning=state.warning(ns, POD, meta(pod).get("name", "")))
        if status.state == ReplicaState.TERMINATED and not ended:
            continue  # being deleted under a live job: its controller makes a new one
        if key[1:] not in newest or created(pod) > created(newest[key[1:]][0]):
            newest[key[1:]] = (pod, status)
    out: dict[tuple[str, int], ReplicaStatus] = {key: status for key, (_, status) in newest.items()}
    for pod in sorted(gone, key=created):
        key = replica_key(pod)
        if key and key[1:] in wanted and key[1:] not in newest:
            status = pod_status(pod, key[1], warning=None)
            if status.state in (ReplicaState.PENDING, ReplicaState.RUNNING, ReplicaState.TERMINATED):
                if not ended:
                    continue  # deleted under a live job: its controller makes a new one
                if status.state == ReplicaState.PENDING:
                    status = ReplicaStatus(ReplicaState.TERMINATED, None, "NotStarted",
                                           "the job ended before it started", pod=status.pod)
                elif status.state == ReplicaState.RUNNING:
                    status = ReplicaStatus(ReplicaState.TERMINATED, None, "Deleted", "the pod was deleted",
                                           pod=status.pod, started=status.started)
            out[key[1:]] = status
    if ended:
        # Pods of an ended job may be gone (and forgotten): whatever was left unfinished ends.
        for r in job.replicas.filter(state__in=[ReplicaState.PENDING, ReplicaState.RUNNING]):
            if (r.role, r.index) not in out:
                started = r.state == ReplicaState.RUNNING
                out[(r.role, r.index)] = ReplicaStatus(
                    ReplicaState.TERMINATED, None, "Terminated" if started else "NotStarted",
                    "stopped by PaddleCloud" if started else "the job ended before it started", pod=r.pod)
        return out
    trainers_obj = state.workload(JOB, ns, manifests.trainer_name(job))
    pservers_obj = state.workload(STATEFULSET, ns, manifests.pserver_name(job))
    for role, index in wanted - set(out):
        kind, name = (STATEFULSET, manifests.pserver_name(job)) if role == "pserver" else \
            (JOB, manifests.trainer_name(job))
        warning = state.warning(ns, kind, name)
        if warning and warning.reason == "FailedCreate":
            out[(role, index)] = ReplicaStatus(ReplicaState.PENDING, None, "FailedCreate", warning.message)
        elif role == "trainer" and trainers_obj is None and job.pservers and job.mode == "ps":
            ready = ready_replicas(pservers_obj)
            out[(role, index)] = ReplicaStatus(
                ReplicaState.PENDING, None, "WaitingForPservers",
                f"trainers start when all {job.pservers} pservers are ready ({ready} ready)")
    failed = workload_failure(trainers_obj)
    if failed and not any(s.state == ReplicaState.FAILED for (r, _), s in out.items() if r == "trainer"):
        for index in range(job.trainers):
            current = out.get(("trainer", index))
            if current is None or current.state != ReplicaState.SUCCEEDED:
                out[("trainer", index)] = ReplicaStatus(ReplicaState.FAILED, None, failed[0], failed[1],
                                                        pod=current.pod if current else "")
    return out
