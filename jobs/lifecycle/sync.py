"""Deriving a job's state from its replicas, as its backend observes them.

Every change is a conditional UPDATE on the current state (jobs/state/transitions.py), so the watcher,
the periodic reconcile and a task running twice can all call these at once and the outcome is
the same.
"""

from __future__ import annotations

import dataclasses

from django.db import transaction
from django.utils import timezone

from ..backends.base import ReplicaStatus
from ..backends.registry import get_backend
from ..live import notify
from ..models import REPLICA_DONE, TERMINAL_STATES, Job, JobEvent, JobState, Replica, ReplicaState
from ..state.transitions import set_reason, transition
from . import restarts


def _apply(replica: Replica, status: ReplicaStatus, job_done: bool, suspended: bool = False) -> bool:
    """Record what a backend observed of a replica's current attempt. A finished replica
    (REPLICA_DONE) never changes again from an observation, whatever is observed later: a cluster
    deletes the pods of a failed job, and a pod being deleted must not turn "Failed, exit 3" into
    "Terminated". Only a new attempt (jobs/state/attempts.py) starts it again. A suspended job's
    replicas that we stopped (or that never started) end Terminated with reason Suspended."""
    if replica.state in REPLICA_DONE:
        return False
    if suspended and status.state in (ReplicaState.PENDING, ReplicaState.TERMINATED):
        status = dataclasses.replace(status, state=ReplicaState.TERMINATED, reason="Suspended",
                                     message="stopped to suspend the job")
    if status.state == ReplicaState.PENDING and job_done:
        status = ReplicaStatus(ReplicaState.TERMINATED, reason="NotStarted", message="the job ended before it started")
    if status.state == ReplicaState.PENDING and replica.state != ReplicaState.PENDING:
        return False  # a replica's progress never goes backwards
    if status.state == ReplicaState.PENDING and replica.restart_at and not status.reason:
        return False  # waiting out its backoff: its own reason says until when
    fields = {"state": status.state, "exit_code": status.exit_code, "reason": status.reason,
              "message": status.message, "pod": status.pod, "started": status.started,
              "finished": status.finished}
    if status.host:
        fields["host"] = status.host
    if status.state != ReplicaState.PENDING:
        fields["restart_at"] = None
    if all(getattr(replica, k) == v for k, v in fields.items()):
        return False
    changed_state = replica.state != status.state
    with transaction.atomic():
        # Conditional on the row, not on this process's copy: another watcher or the reconcile
        # may have recorded the replica's end since it was read, or started a new attempt (the
        # replicas are read before the backend observes them, so an observation is never of an
        # attempt older than the one it is applied to).
        rows = Replica.objects.filter(pk=replica.pk, attempt=replica.attempt)
        if not rows.exclude(state__in=REPLICA_DONE).update(**fields):
            return False
        for key, value in fields.items():
            setattr(replica, key, value)
        if changed_state:
            JobEvent.objects.create(job_id=replica.job_id, replica=replica, state=status.state,
                                    reason=status.reason or status.state, message=status.message)
    return True


def sync_job(job: Job) -> None:
    """Observe the job's replicas, record what changed, and move the job on accordingly."""
    backend = get_backend(job.datacenter)
    replicas = list(job.replicas.all())  # before observing: attempts only ever grow
    statuses = backend.observe(job)
    done = job.state in TERMINAL_STATES
    suspended = job.state == JobState.SUSPENDED
    changed = False
    for r in replicas:
        if (r.role, r.index) in statuses:
            status = statuses[(r.role, r.index)]
            changed |= _apply(r, status, done, suspended)
            if backend.restarts_replicas and not done and not suspended:
                changed |= restarts.record_cluster_restarts(job, r, status)
    if changed:
        transaction.on_commit(lambda: notify.job_changed(job.pk))

    if done or suspended:
        if any(r.state == ReplicaState.RUNNING for r in replicas):
            running = [r for r in replicas if r.state == ReplicaState.RUNNING]
            if suspended:
                backend.suspend(job)
            else:
                backend.stop(job, running)
        return
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        return  # still being launched: the launcher moves it on
    if restarts.handle_failures(job, backend, replicas):
        transaction.on_commit(lambda: notify.job_changed(job.pk))
        return
    restarts.start_due(job, backend, replicas)

    trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
    pservers = [r for r in replicas if r.role == Replica.Role.PSERVER]
    gone_pserver = next((r for r in pservers if r.state in REPLICA_DONE), None)
    all_started = all(r.state != ReplicaState.PENDING for r in replicas)
    if trainers and all(r.state == ReplicaState.SUCCEEDED for r in trainers):
        # Done, whatever the pservers do now (a JobSet's controller stops them itself).
        if transition(job, JobState.SUCCEEDED, "Completed", f"all {len(trainers)} trainers exited 0"):
            backend.stop(job)  # the pservers
    elif gone_pserver:
        # Parameter servers never exit by themselves: one that did leaves the trainers stranded.
        restarts.fail(job, backend, "PserverExited", restarts.pserver_gone_message(gone_pserver, trainers))
    elif job.state == JobState.STARTING and all_started:
        transition(job, JobState.RUNNING, "Running", f"all {len(replicas)} replicas started",
                   from_states=[JobState.STARTING])
    elif job.timeout and job.started and (timezone.now() - job.started).total_seconds() > job.timeout:
        if transition(job, JobState.FAILED, "DeadlineExceeded", f"still running after {job.timeout} s"):
            backend.stop(job)
    elif job.reason == "Restarting" and all_started:
        set_reason(job, "Running", f"all {len(replicas)} replicas started again (restart {job.restarts})")
