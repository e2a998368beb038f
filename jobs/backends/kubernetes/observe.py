"""Each replica's status from the watched pods and workloads of a job (the watcher's in-memory
state, no API call): the newest pod of each replica in its current attempt, what deleted pods
said last, what the trainer Job and the pserver StatefulSet (or, for a JobSet, its two Jobs)
report for replicas that have no pod, a trainer's retries by its Job (backoffLimitPerIndex), and
the gang scheduler's reason while the job's pods wait for it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.db.models import Max

from ... import spec as job_spec
from ...models import TERMINAL_STATES, Job, ReplicaState
from ..base import ReplicaStatus
from . import gang, manifests, workloads
from .informer import JOB, POD, PODGROUP, STATEFULSET, WORKLOAD, ClusterState
from .status import meta, parse_time, pod_status, ready_replicas, replica_key, workload_failure, workload_finished

# Set by the Job controller on the pods it makes for an index that failed before (1.28+).
INDEX_FAILURES = "batch.kubernetes.io/job-index-failure-count"


def created(obj: dict[str, Any]) -> datetime:
    return parse_time(meta(obj).get("creationTimestamp")) or datetime.min.replace(tzinfo=UTC)


def _recency(pod: dict[str, Any]) -> tuple[datetime, bool]:
    """Newer first; at the same second (timestamps have no more), the index's live pod: a Job
    makes a failed index's next pod only after the failure."""
    return created(pod), (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded")


def current_attempt(job: Job) -> int:
    """The attempt the job's objects are made for: every replica starts each attempt together here."""
    return int(job.replicas.aggregate(n=Max("attempt"))["n"] or 0)


def pod_attempt(pod: dict[str, Any]) -> int:
    try:
        return int((meta(pod).get("labels") or {}).get(manifests.LABEL_ATTEMPT, "0"))
    except ValueError:
        return -1


def failed_indexes(job_obj: dict[str, Any] | None) -> set[int]:
    """A Job's status.failedIndexes ("1,3-5"): indexes that failed for good."""
    out: set[int] = set()
    for part in (((job_obj or {}).get("status") or {}).get("failedIndexes") or "").split(","):
        first, _, last = part.strip().partition("-")
        if first.isdigit():
            out.update(range(int(first), int(last if last.isdigit() else first) + 1))
    return out


def _disrupted(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _trainer_retries(job: Job, pods: list[dict[str, Any]], job_obj: dict[str, Any] | None,
                     out: dict[tuple[str, int], ReplicaStatus]) -> None:
    """Per index: failures so far (ReplicaStatus.restarts), the last one's exit code and message,
    and Failed only once the Job gives the index up; until then the replica is Restarting."""
    limit, _ = workloads.trainer_failure_policy(job)
    permanent = job_spec.exit_codes(job.permanent_exit_codes or "")
    given_up = failed_indexes(job_obj) | (set(range(job.trainers)) if workload_failure(job_obj) else set())
    by_index: dict[int, list[dict[str, Any]]] = {}
    for pod in pods:
        key = replica_key(pod)
        if key and key[1] == "trainer":
            by_index.setdefault(key[2], []).append(pod)
    for index, mine in by_index.items():
        mine.sort(key=created)
        failures = [p for p in mine if (p.get("status") or {}).get("phase") == "Failed" and not _disrupted(p)]
        counted = max([len(failures)] + [int((meta(p).get("annotations") or {}).get(INDEX_FAILURES, "0") or 0)
                                         for p in mine])
        current = out.get(("trainer", index))
        if current is None or not counted:
            continue
        last = pod_status(failures[-1], "trainer") if failures else current
        restarts = counted
        if current.state == ReplicaState.FAILED:
            if index in given_up or last.exit_code in permanent or counted > limit:
                restarts = counted - 1  # the last failure was not restarted
            else:
                current = ReplicaStatus(ReplicaState.RUNNING, None, "Restarting",
                                        f"{last.message}; restart {counted} of {limit}", pod=current.pod)
        elif current.state == ReplicaState.PENDING:
            # The index's next pod, not yet running: the replica itself is still under way.
            current = ReplicaStatus(ReplicaState.RUNNING, None, "Restarting",
                                    f"restart {counted} of {limit}: {current.reason} {current.message}".strip(),
                                    pod=current.pod)
        out[("trainer", index)] = replace(current, restarts=restarts, last_exit_code=last.exit_code,
                                          last_message=last.message)


def gang_reason(state: ClusterState, job: Job, ns: str, attempt: int) -> tuple[str, str] | None:
    """The gang scheduler's reason for holding the job's pods back, if it holds them."""
    group = state.workload(PODGROUP, ns, manifests.podgroup_name(job, attempt))
    if group is None:
        group = state.owned(WORKLOAD, ns, "Job", manifests.trainer_name(job, attempt))
    if group is None:  # a pserver job under Kueue: the JobSet's one Workload
        group = state.owned(WORKLOAD, ns, "JobSet", manifests.jobset_name(job, attempt))
    return gang.waiting_reason(group)


def _controller(job: Job, role: str, attempt: int, jobset: bool) -> tuple[str, str]:
    """(kind, name) of the Job or StatefulSet that makes `role`'s pods in this attempt."""
    if jobset:
        return JOB, manifests.jobset_job_name(job, role, attempt)
    if role == "pserver":
        return STATEFULSET, manifests.pserver_name(job, attempt)
    return JOB, manifests.trainer_name(job, attempt)


def observe_job(state: ClusterState, job: Job, ns: str, *, gang_on: bool = False, jobset: bool = False,
                kubeflow: bool = False) -> dict[tuple[str, int], ReplicaStatus]:
    """Each replica's status from the watched pods and workloads of `job` (`jobset`: it runs as
    one JobSet, whose Jobs are named by the JobSet controller)."""
    live_all, gone_all = state.pods_of(job.pk)
    attempts = {(role, index): attempt for role, index, attempt in job.replicas.values_list("role", "index", "attempt")}
    attempt = max(attempts.values(), default=0)
    live = [p for p in live_all if (k := replica_key(p)) and pod_attempt(p) == attempts.get(k[1:], attempt)]
    gone = [p for p in gone_all if (k := replica_key(p)) and pod_attempt(p) == attempts.get(k[1:], attempt)]
    wanted = {("pserver", i) for i in range(job.pservers)} | {("trainer", i) for i in range(job.trainers)}
    ended = job.state in TERMINAL_STATES

    def replaced(role: str) -> bool:
        """Whether a deleted pod of `role` gets a successor: its controller is still there and
        not finished. Not so after a stop (ours, for a gang restart or suspend) or once a JobSet
        gave up on its Jobs: the replica then ends, rather than waiting for a pod that never comes.
        (The training operator's PaddleJob, not watched here, is taken to replace its pods.)"""
        if kubeflow:
            return True
        kind, name = _controller(job, role, attempt, jobset)
        controller = state.workload(kind, ns, name)
        return controller is not None and not workload_finished(controller)

    newest: dict[tuple[str, int], tuple[dict[str, Any], ReplicaStatus]] = {}
    for pod in live:
        key = replica_key(pod)
        if not key or key[1:] not in wanted:
            continue
        status = pod_status(pod, key[1], warning=state.warning(ns, POD, meta(pod).get("name", "")))
        if status.state == ReplicaState.TERMINATED and not ended and replaced(key[1]):
            continue  # being deleted under a live job: its controller makes a new one
        if key[1:] not in newest or _recency(pod) > _recency(newest[key[1:]][0]):
            newest[key[1:]] = (pod, status)
    out: dict[tuple[str, int], ReplicaStatus] = {key: status for key, (_, status) in newest.items()}
    for pod in sorted(gone, key=created):
        key = replica_key(pod)
        if key and key[1:] in wanted and key[1:] not in newest:
            status = pod_status(pod, key[1], warning=None)
            if status.state in (ReplicaState.PENDING, ReplicaState.RUNNING, ReplicaState.TERMINATED):
                if not ended and replaced(key[1]):
                    continue  # deleted under a live job: its controller makes a new one
                if status.state == ReplicaState.PENDING:
                    status = ReplicaStatus(ReplicaState.TERMINATED, None, "NotStarted",
                                           "the job ended before it started", pod=status.pod)
                elif status.state == ReplicaState.RUNNING:
                    status = ReplicaStatus(ReplicaState.TERMINATED, None, "Deleted", "the pod was deleted",
                                           pod=status.pod, started=status.started)
            out[key[1:]] = status
    trainers_obj = state.workload(JOB, ns, _controller(job, "trainer", attempt, jobset)[1])
    if not ended:
        _trainer_retries(job, live + gone, trainers_obj, out)
    if ended:
        # Pods of an ended job may be gone (and forgotten): whatever was left unfinished ends.
        for r in job.replicas.filter(state__in=[ReplicaState.PENDING, ReplicaState.RUNNING]):
            if (r.role, r.index) not in out:
                started = r.state == ReplicaState.RUNNING
                out[(r.role, r.index)] = ReplicaStatus(
                    ReplicaState.TERMINATED, None, "Terminated" if started else "NotStarted",
                    "stopped by PaddleCloud" if started else "the job ended before it started", pod=r.pod)
        return out
    pservers_obj = state.workload(STATEFULSET, ns, manifests.pserver_name(job, attempt))
    for role, index in wanted - set(out):
        kind, name = _controller(job, role, attempt, jobset)
        warning = state.warning(ns, kind, name)
        if warning and warning.reason == "FailedCreate":
            out[(role, index)] = ReplicaStatus(ReplicaState.PENDING, None, "FailedCreate", warning.message)
        elif role == "trainer" and trainers_obj is None and job.pservers and job.mode == "ps" and not gang_on:
            ready = ready_replicas(pservers_obj)
            out[(role, index)] = ReplicaStatus(
                ReplicaState.PENDING, None, "WaitingForPservers",
                f"trainers start when all {job.pservers} pservers are ready ({ready} ready)")
    held = gang_reason(state, job, ns, attempt)
    if held:
        for wanted_key in wanted:
            current = out.get(wanted_key)
            if current is None or current.state == ReplicaState.PENDING:
                out[wanted_key] = ReplicaStatus(ReplicaState.PENDING, None, held[0], held[1],
                                         pod=current.pod if current else "")
    failed = workload_failure(trainers_obj)
    if failed and not any(s.state == ReplicaState.FAILED for (r, _), s in out.items() if r == "trainer"):
        # The Job may be seen failed before the pod that failed it (separate watches): an index
        # it gave up whose pod is known gets that pod's own exit code from the pod watch.
        given_up = failed_indexes(trainers_obj)
        for index in sorted(given_up) if given_up else range(job.trainers):
            if given_up and ("trainer", index) in out:
                continue
            current = out.get(("trainer", index))
            if current is None or current.state != ReplicaState.SUCCEEDED:
                out[("trainer", index)] = ReplicaStatus(ReplicaState.FAILED, None, failed[0], failed[1],
                                                        pod=current.pod if current else "")
    return out
