"""Deriving a job's state from its replicas, as its backend observes them: the facts each backend
reports are recorded here, and the same rules move every job on, whatever runs it (restarts in
restarts.py, waiting replicas in waiting.py, a runtime made in the background in preparing.py).

Every change is a conditional UPDATE on the current state (jobs/state/transitions.py), so the watcher,
the periodic reconcile and a task running twice can all call these at once and the outcome is
the same.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..backends.base import Backend, ReplicaStatus
from ..backends.registry import get_backend
from ..live import notify
from ..models import REPLICA_DONE, TERMINAL_STATES, Job, JobEvent, JobState, Replica, ReplicaState
from ..state.transitions import set_reason, transition
from . import preparing, restarts, waiting


def observed(replica: Replica, status: ReplicaStatus, job_done: bool, suspended: bool,
             job_restarts: int) -> dict[str, Any] | None:
    """The replica's fields as `status` says they are now; None when the observation must not
    change the replica. A finished replica (REPLICA_DONE) never changes again from an observation,
    whatever is observed later: a cluster deletes the pods of a failed job, and a pod being deleted
    must not turn "Failed, exit 3" into "Terminated". Only a new attempt (jobs/state/attempts.py)
    starts it again. A suspended job's replicas that we stopped (or that never started) end
    Terminated with reason Suspended."""
    if replica.state in REPLICA_DONE:
        return None
    if suspended and status.state in (ReplicaState.PENDING, ReplicaState.TERMINATED):
        status = dataclasses.replace(status, state=ReplicaState.TERMINATED, reason="Suspended",
                                     message="stopped to suspend the job")
    if status.state == ReplicaState.PENDING and job_done:
        status = ReplicaStatus(ReplicaState.TERMINATED, reason="NotStarted", message="the job ended before it started")
    if status.state == ReplicaState.PENDING and replica.state != ReplicaState.PENDING:
        return None  # a replica's progress never goes backwards
    if status.state == ReplicaState.PENDING and replica.restart_at and not status.reason:
        return None  # waiting out its backoff: its own reason says until when
    fields: dict[str, Any] = {"state": status.state, "exit_code": status.exit_code, "reason": status.reason,
                              "message": status.message, "pod": status.pod, "started": status.started,
                              "finished": status.finished}
    if status.host:
        fields["host"] = status.host
    if status.state != ReplicaState.PENDING:
        fields["restart_at"] = None
    if job_restarts + status.crash_restarts > replica.restarts:
        fields["restarts"] = job_restarts + status.crash_restarts  # restarted in place: counted, no new attempt
    return fields


def _apply(replica: Replica, status: ReplicaStatus, job_done: bool, suspended: bool = False,
           job_restarts: int = 0) -> bool:
    """Record what a backend observed of a replica's current attempt (see observed)."""
    fields = observed(replica, status, job_done, suspended, job_restarts)
    if fields is None or all(getattr(replica, k) == v for k, v in fields.items()):
        return False
    changed_state = replica.state != fields["state"]
    with transaction.atomic():
        # Conditional on the row, not on this process's copy: another watcher or the reconcile
        # may have recorded the replica's end since it was read, or started a new attempt (the
        # replicas are read before the backend observes them, so an observation is never of an
        # attempt older than the one it is applied to).
        rows = Replica.objects.filter(pk=replica.pk, attempt=replica.attempt)
        if changed_state:  # and on the state it was read in: of two that saw it move, one records it
            rows = rows.filter(state=replica.state)
        if not rows.exclude(state__in=REPLICA_DONE).update(**fields):
            return False
        for key, value in fields.items():
            setattr(replica, key, value)
        if changed_state:
            JobEvent.objects.create(job_id=replica.job_id, replica=replica, state=replica.state,
                                    reason=replica.reason or replica.state, message=replica.message)
    return True


def _record(job: Job, backend: Backend, replicas: list[Replica], statuses: dict[tuple[str, int], ReplicaStatus],
            done: bool, suspended: bool) -> bool:
    """Apply each replica's observed status, and the restarts the backend made itself."""
    changed = False
    for r in replicas:
        status = statuses.get((r.role, r.index))
        if status is None:
            continue
        changed |= _apply(r, status, done, suspended, job.restarts)
        if backend.restarts_replicas and not done and not suspended:
            changed |= restarts.record_cluster_restarts(job, r, status)
    return changed


def sync_job(job: Job) -> None:
    """Observe the job's replicas, record what changed, and move the job on accordingly."""
    backend = get_backend(job.datacenter)
    replicas = list(job.replicas.all())  # before observing: attempts only ever grow
    statuses = backend.observe(job)
    done = job.state in TERMINAL_STATES
    suspended = job.state == JobState.SUSPENDED
    if _record(job, backend, replicas, statuses, done, suspended):
        transaction.on_commit(lambda: notify.job_changed(job.pk))
    if done or suspended:
        running = [r for r in replicas if r.state == ReplicaState.RUNNING]
        if running and suspended:
            backend.suspend(job)
        elif running:
            backend.stop(job, running)
        return
    if job.state == JobState.BUILDING:
        preparing.check(job, backend)  # a runtime made in the background: its launch continues once ready
        return
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        return  # still being launched: the launcher moves it on
    if restarts.handle_failures(job, backend, replicas):
        transaction.on_commit(lambda: notify.job_changed(job.pk))
        return
    restarts.start_due(job, backend, replicas)
    if not _move_on(job, backend, replicas):
        waiting.check(job, backend, replicas, statuses)


def _move_on(job: Job, backend: Backend, replicas: list[Replica]) -> bool:
    """Succeed, fail or start running the job as its replicas say; True when it ended."""
    trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
    pservers = [r for r in replicas if r.role == Replica.Role.PSERVER]
    gone_pserver = next((r for r in pservers if r.state in REPLICA_DONE), None)
    all_started = all(r.state != ReplicaState.PENDING for r in replicas)
    if trainers and all(r.state == ReplicaState.SUCCEEDED for r in trainers):
        # Done, whatever the pservers do now (a JobSet's controller stops them itself).
        exited = "the trainer exited 0" if len(trainers) == 1 else f"all {len(trainers)} trainers exited 0"
        if transition(job, JobState.SUCCEEDED, "Completed", exited):
            backend.stop(job)  # the pservers
        return True
    if gone_pserver:
        # Parameter servers never exit by themselves: one that did leaves the trainers stranded.
        restarts.fail(job, backend, "PserverExited", restarts.pserver_gone_message(gone_pserver, trainers))
        return True
    if job.state == JobState.STARTING and all_started:
        transition(job, JobState.RUNNING, "Running", f"all {len(replicas)} replicas started",
                   from_states=[JobState.STARTING])
    elif job.timeout and job.started and (timezone.now() - job.started).total_seconds() > job.timeout:
        if transition(job, JobState.FAILED, "DeadlineExceeded", f"still running after {job.timeout} s"):
            backend.stop(job)
        return True
    elif job.reason == "Restarting" and all_started:
        set_reason(job, "Running", f"all {len(replicas)} replicas started again (restart {job.restarts})")
    return False
