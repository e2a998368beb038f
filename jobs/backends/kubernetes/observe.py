"""Each replica's status from what the watches saw of a job (no API call): the newest pod of each
replica in its current attempt, what deleted pods said last, a trainer's retries by its Job
(backoffLimitPerIndex), why a replica without a pod waits (its layout's reason, a controller's
FailedCreate, the gang scheduler's hold), and the facts the lifecycle's rules need (since when a
replica waits, whether it is blocked or queued).

observe_job() is a pure function of JobFacts (the job, from the database) and Seen (the
cluster, from the watches), so its table tests need neither; gather() reads both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django.db.models import Max

from ... import spec as job_spec
from ...models import TERMINAL_STATES, Job, ReplicaState
from ..base import ReplicaStatus
from . import manifests, workloads
from .gang import Verdict
from .informer import POD, ClusterState
from .layouts import Layout
from .layouts.plain import WAITING_FOR_PSERVERS
from .status import (
    DISK_LIMIT,
    Warning,  # noqa: A004 - Kubernetes' event type, named as Kubernetes names it
    disk_eviction,
    meta,
    parse_time,
    pod_status,
    replica_key,
    workload_failure,
    workload_finished,
)

Obj = dict[str, Any]
Key = tuple[str, int]
Statuses = dict[Key, ReplicaStatus]
# Set by the Job controller on the pods it makes for an index that failed before (1.28+).
INDEX_FAILURES = "batch.kubernetes.io/job-index-failure-count"
NOT_STARTED = "the job ended before it started"


@dataclass(frozen=True)
class JobFacts:
    """What observing a job needs of it (the database's side)."""

    job_id: int
    pservers: int
    trainers: int
    mode: str = "ps"
    ended: bool = False
    attempts: Mapping[Key, int] = field(default_factory=dict)  # each replica's current attempt
    unfinished: Mapping[Key, tuple[str, str]] = field(default_factory=dict)  # (state, pod) of those not done
    retry_limit: int = 0  # backoffLimitPerIndex of the trainers
    permanent: frozenset[int] = frozenset()

    @property
    def attempt(self) -> int:
        return max(self.attempts.values(), default=0)

    @property
    def wanted(self) -> set[Key]:
        return {("pserver", i) for i in range(self.pservers)} | {("trainer", i) for i in range(self.trainers)}

    @classmethod
    def of(cls, job: Job) -> JobFacts:
        rows = list(job.replicas.values_list("role", "index", "attempt", "state", "pod"))
        return cls(job.pk, job.pservers, job.trainers, job.mode, job.state in TERMINAL_STATES,
                   {(r, i): a for r, i, a, _, _ in rows},
                   {(r, i): (s, p) for r, i, _, s, p in rows if s in (ReplicaState.PENDING, ReplicaState.RUNNING)},
                   workloads.trainer_failure_policy(job)[0],
                   frozenset(job_spec.exit_codes(job.permanent_exit_codes or "")))


@dataclass(frozen=True)
class Seen:
    """What the watches saw of a job's current attempt (the cluster's side)."""

    live: Sequence[Obj] = ()
    gone: Sequence[Obj] = ()  # last states of deleted pods
    controllers: Mapping[str, Obj | None] = field(default_factory=dict)  # role -> its Job / StatefulSet
    controller_warnings: Mapping[str, Warning] = field(default_factory=dict)  # role -> latest Warning event
    pod_warnings: Mapping[str, Warning] = field(default_factory=dict)  # pod name -> latest Warning event
    gang: Verdict | None = None


def current_attempt(job: Job) -> int:
    """The attempt the job's objects are made for: every replica starts each attempt together here."""
    return int(job.replicas.aggregate(n=Max("attempt"))["n"] or 0)


def gather(state: ClusterState, layout: Layout, job: Job, ns: str) -> tuple[JobFacts, Seen]:
    facts = JobFacts.of(job)
    live, gone = state.pods_of(job.pk)
    roles = [r for r, n in (("pserver", job.pservers), ("trainer", job.trainers)) if n]
    made_by = {role: layout.controller(job, role, facts.attempt) for role in roles}
    warnings = {role: w for role, (kind, name) in made_by.items() if (w := state.warning(ns, kind, name))}
    pod_warnings = {n: w for p in live if (w := state.warning(ns, POD, n := meta(p).get("name", "")))}
    return facts, Seen(live, gone, {role: state.workload(kind, ns, name) for role, (kind, name) in made_by.items()},
                       warnings, pod_warnings, _verdict(state, layout, job, ns, facts.attempt))


def _verdict(state: ClusterState, layout: Layout, job: Job, ns: str, attempt: int) -> Verdict | None:
    gang, workload = layout.gang, layout.names(job, attempt)[0][1]
    found = gang.group_name(job, attempt, workload)
    if found is None or gang.watched is None:
        return None
    kind, name, by_owner = found
    group = state.owned(gang.watched.kind, ns, kind, name) if by_owner else state.workload(gang.watched.kind, ns, name)
    absent = gang.watched.kind in state.absent
    return gang.verdict(group, known=gang.watched.kind in state.synced or absent, absent=absent)


def observe_job(layout: Layout, facts: JobFacts, seen: Seen) -> Statuses:
    """Each replica's status, keyed by (role, index)."""
    live, gone = _current(facts, seen.live), _current(facts, seen.gone)
    out = _from_live(facts, seen, live)
    _from_gone(facts, seen, gone, out)
    if facts.ended:
        _end_unfinished(facts, out)
        return out
    _trainer_retries(facts, live + gone, seen.controllers.get("trainer"), out)
    _over_disk_limits(live + gone, out)
    _unstarted(layout, facts, seen, out)
    _gang(facts, seen.gang, out)
    _behind_a_queue(out)
    _trainers_given_up(facts, seen.controllers.get("trainer"), out)
    return out


def created(obj: Obj) -> datetime:
    return parse_time(meta(obj).get("creationTimestamp")) or datetime.min.replace(tzinfo=UTC)


def pod_attempt(pod: Obj) -> int:
    try:
        return int((meta(pod).get("labels") or {}).get(manifests.LABEL_ATTEMPT, "0"))
    except ValueError:
        return -1


def _current(facts: JobFacts, pods: Iterable[Obj]) -> list[Obj]:
    """The pods of the replicas' current attempts (an earlier attempt's never count)."""
    return [p for p in pods if (k := replica_key(p)) and k[1:] in facts.wanted
            and pod_attempt(p) == facts.attempts.get(k[1:], facts.attempt)]


def _recency(pod: Obj) -> tuple[datetime, bool]:
    """Newer first; at the same second (timestamps have no more), the index's live pod: a Job
    makes a failed index's next pod only after the failure."""
    return created(pod), (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded")


def _replaced(facts: JobFacts, seen: Seen, role: str) -> bool:
    """Whether a deleted pod of `role` gets a successor: its controller is still there and not
    finished. Not so after a stop (ours, for a gang restart or suspend) or once a JobSet gave up
    on its Jobs: the replica then ends, rather than waiting for a pod that never comes."""
    controller = seen.controllers.get(role)
    return not facts.ended and controller is not None and not workload_finished(controller)


def _from_live(facts: JobFacts, seen: Seen, live: list[Obj]) -> Statuses:
    newest: dict[Key, tuple[Obj, ReplicaStatus]] = {}
    for pod in live:
        key = replica_key(pod)
        assert key is not None  # _current keeps only ours
        status = pod_status(pod, key[1], warning=seen.pod_warnings.get(meta(pod).get("name", "")))
        if status.state == ReplicaState.TERMINATED and _replaced(facts, seen, key[1]):
            continue  # being deleted under a live job: its controller makes a new one
        if key[1:] not in newest or _recency(pod) > _recency(newest[key[1:]][0]):
            newest[key[1:]] = (pod, status)
    return {key: status for key, (_, status) in newest.items()}


def _from_gone(facts: JobFacts, seen: Seen, gone: list[Obj], out: Statuses) -> None:
    """What deleted pods said last, for replicas with no live pod."""
    live = set(out)
    for pod in sorted(gone, key=created):
        key = replica_key(pod)
        assert key is not None
        if key[1:] in live:
            continue
        status = pod_status(pod, key[1])
        if status.state in (ReplicaState.PENDING, ReplicaState.RUNNING, ReplicaState.TERMINATED):
            if _replaced(facts, seen, key[1]):
                continue  # deleted under a live job: its controller makes a new one
            if status.state == ReplicaState.PENDING:
                status = ReplicaStatus(ReplicaState.TERMINATED, None, "NotStarted", NOT_STARTED, pod=status.pod)
            elif status.state == ReplicaState.RUNNING:
                status = ReplicaStatus(ReplicaState.TERMINATED, None, "Deleted", "the pod was deleted",
                                       pod=status.pod, started=status.started)
        out[key[1:]] = status


def _end_unfinished(facts: JobFacts, out: Statuses) -> None:
    """Pods of an ended job may be gone (and forgotten): whatever was left unfinished ends."""
    for key, (state, pod) in facts.unfinished.items():
        if key not in out:
            started = state == ReplicaState.RUNNING
            out[key] = ReplicaStatus(ReplicaState.TERMINATED, None, "Terminated" if started else "NotStarted",
                                     "stopped by PaddleCloud" if started else NOT_STARTED, pod=pod)


def failed_indexes(job_obj: Obj | None) -> set[int]:
    """A Job's status.failedIndexes ("1,3-5"): indexes that failed for good."""
    out: set[int] = set()
    for part in (((job_obj or {}).get("status") or {}).get("failedIndexes") or "").split(","):
        first, _, last = part.strip().partition("-")
        if first.isdigit():
            out.update(range(int(first), int(last if last.isdigit() else first) + 1))
    return out


def _disrupted(pod: Obj) -> bool:
    return any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _failures(pods: list[Obj]) -> tuple[int, list[Obj]]:
    """How often an index failed (its pods, or the Job's count on its newest pod), and the failed pods."""
    failed = [p for p in sorted(pods, key=created) if (p.get("status") or {}).get("phase") == "Failed"
              and not _disrupted(p)]
    counted = max([len(failed)] + [int((meta(p).get("annotations") or {}).get(INDEX_FAILURES, "0") or 0)
                                   for p in pods])
    return counted, failed


def _trainer_retries(facts: JobFacts, pods: list[Obj], job_obj: Obj | None, out: Statuses) -> None:
    """Per index: failures so far (ReplicaStatus.restarts), the last one's exit code and message,
    and Failed only once the Job gives the index up; until then the replica is Restarting."""
    given_up = failed_indexes(job_obj) | (set(range(facts.trainers)) if workload_failure(job_obj) else set())
    by_index: dict[int, list[Obj]] = {}
    for pod in pods:
        key = replica_key(pod)
        if key and key[1] == "trainer":
            by_index.setdefault(key[2], []).append(pod)
    for index, mine in by_index.items():
        counted, failures = _failures(mine)
        current = out.get(("trainer", index))
        if current is None or not counted:
            continue
        last = pod_status(failures[-1], "trainer") if failures else current
        restarts, limit = counted, facts.retry_limit
        if current.state == ReplicaState.FAILED:
            if index in given_up or last.exit_code in facts.permanent or counted > limit:
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


def _over_disk_limits(pods: list[Obj], out: Statuses) -> None:
    """A replica whose pod was evicted for going over its disk limit fails with DiskLimit, whatever
    its controller made since: the StatefulSet's or the trainer Job's next pod (the Job counts such
    a pod as a failure, retried within backoffLimitPerIndex: no DisruptionTarget condition) would
    only do the same again. The lifecycle fails the job with it, as for a local replica."""
    for pod in sorted(pods, key=created):
        key = replica_key(pod)
        if key is None or not disk_eviction(pod.get("status") or {}):
            continue
        current = out.get(key[1:])
        if current is None or current.reason != DISK_LIMIT:  # the first eviction speaks for the replica
            out[key[1:]] = pod_status(pod, key[1])


def _unstarted(layout: Layout, facts: JobFacts, seen: Seen, out: Statuses) -> None:
    """Replicas without a pod: refused by the cluster (a controller's FailedCreate), or waiting
    for what their layout says."""
    for role, index in sorted(facts.wanted - set(out)):
        warning = seen.controller_warnings.get(role)
        if warning and warning.reason == "FailedCreate":
            out[(role, index)] = ReplicaStatus(ReplicaState.PENDING, None, "FailedCreate", warning.message,
                                               blocked=True)
        elif (waiting := layout.unstarted(facts, role, seen.controllers)) is not None:
            out[(role, index)] = waiting


def _gang(facts: JobFacts, verdict: Verdict | None, out: Statuses) -> None:
    """While the gang scheduler holds the job, every replica not started waits in its queue with
    its reason; once it let the job go, no replica waits since before that."""
    if verdict is None:
        return
    for key in facts.wanted:
        current = out.get(key)
        if current is not None and current.state != ReplicaState.PENDING:
            continue
        if verdict.held:
            out[key] = ReplicaStatus(ReplicaState.PENDING, None, verdict.reason, verdict.message, queued=True,
                                     pod=current.pod if current else "")
        elif current is not None and verdict.since is not None:
            out[key] = replace(current, pending_since=max(filter(None, (current.pending_since, verdict.since))))


def _behind_a_queue(out: Statuses) -> None:
    """Trainers waiting for pservers that wait their turn in a scheduler's queue wait in it too."""
    if any(s.queued for (role, _), s in out.items() if role == "pserver"):
        for key, status in out.items():
            if key[0] == "trainer" and status.reason == WAITING_FOR_PSERVERS:
                out[key] = replace(status, blocked=False, queued=True)


def _trainers_given_up(facts: JobFacts, trainers: Obj | None, out: Statuses) -> None:
    """The trainer Job failed: it may be seen so before the pod that failed it (separate watches).
    An index it gave up whose pod is known keeps that pod's own exit code from the pod watch."""
    failed = workload_failure(trainers)
    if not failed or any(s.state == ReplicaState.FAILED for (r, _), s in out.items() if r == "trainer"):
        return
    given_up = failed_indexes(trainers)
    for index in sorted(given_up) if given_up else range(facts.trainers):
        current = out.get(("trainer", index))
        if given_up and current is not None:
            continue
        if current is None or current.state != ReplicaState.SUCCEEDED:
            out[("trainer", index)] = ReplicaStatus(ReplicaState.FAILED, None, failed[0], failed[1],
                                                    pod=current.pod if current else "")

