"""Deriving a job's state from its replicas, as its backend observes them.

Every change is a conditional UPDATE on the current state (jobs/transitions.py), so the watcher,
the periodic reconcile and a task running twice can all call these at once and the outcome is
the same.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from . import logstore, notify
from .backends.base import ReplicaStatus
from .backends.registry import get_backend
from .models import REPLICA_DONE, TERMINAL_STATES, Job, JobEvent, JobState, Replica, ReplicaState
from .transitions import transition

FAILURE_LOG_LINES = 20


def _apply(replica: Replica, status: ReplicaStatus, job_done: bool) -> bool:
    """Record what a backend observed of a replica. A finished replica (REPLICA_DONE) never
    changes again, whatever is observed later: a cluster deletes the pods of a failed job, and
    a pod being deleted must not turn "Failed, exit 3" into "Terminated"."""
    if replica.state in REPLICA_DONE:
        return False
    if status.state == ReplicaState.PENDING and job_done:
        status = ReplicaStatus(ReplicaState.TERMINATED, reason="NotStarted", message="the job ended before it started")
    if status.state == ReplicaState.PENDING and replica.state != ReplicaState.PENDING:
        return False  # a replica's progress never goes backwards
    fields = {"state": status.state, "exit_code": status.exit_code, "reason": status.reason,
              "message": status.message, "pod": status.pod, "started": status.started,
              "finished": status.finished}
    if status.host:
        fields["host"] = status.host
    if all(getattr(replica, k) == v for k, v in fields.items()):
        return False
    changed_state = replica.state != status.state
    with transaction.atomic():
        # Conditional on the row, not on this process's copy: another watcher or the reconcile
        # may have recorded the replica's end since it was read.
        if not Replica.objects.filter(pk=replica.pk).exclude(state__in=REPLICA_DONE).update(**fields):
            return False
        for key, value in fields.items():
            setattr(replica, key, value)
        if changed_state:
            JobEvent.objects.create(job_id=replica.job_id, replica=replica, state=status.state,
                                    reason=status.reason or status.state, message=status.message)
    return True


def _failure_message(replica: Replica) -> str:
    lines = logstore.tail(replica, FAILURE_LOG_LINES).text.rstrip()
    head = f"{replica.name} {replica.message or 'failed'}"
    return f"{head}. Last log lines:\n{lines}" if lines else head


def sync_job(job: Job) -> None:
    """Observe the job's replicas, record what changed, and move the job on accordingly."""
    backend = get_backend(job.datacenter)
    statuses = backend.observe(job)
    replicas = list(job.replicas.all())
    done = job.state in TERMINAL_STATES
    changed = False
    for r in replicas:
        if (r.role, r.index) in statuses:
            changed |= _apply(r, statuses[(r.role, r.index)], done)
    if changed:
        transaction.on_commit(lambda: notify.job_changed(job.pk))

    if done:
        if any(r.state == ReplicaState.RUNNING for r in replicas):
            backend.stop(job, [r for r in replicas if r.state == ReplicaState.RUNNING])
        return
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        return  # still being launched: the launcher moves it on

    trainers = [r for r in replicas if r.role == Replica.Role.TRAINER]
    pservers = [r for r in replicas if r.role == Replica.Role.PSERVER]
    failed = next((r for r in replicas if r.state == ReplicaState.FAILED), None)
    gone_pserver = next((r for r in pservers if r.state in REPLICA_DONE), None)
    if failed:
        if transition(job, JobState.FAILED, "ReplicaFailed", _failure_message(failed)):
            backend.stop(job)
    elif gone_pserver:
        # Parameter servers never exit by themselves: one that did leaves the trainers stranded.
        if transition(job, JobState.FAILED, "PserverExited", _failure_message(gone_pserver)):
            backend.stop(job)
    elif trainers and all(r.state == ReplicaState.SUCCEEDED for r in trainers):
        if transition(job, JobState.SUCCEEDED, "Completed", f"all {len(trainers)} trainers exited 0"):
            backend.stop(job)  # the pservers
    elif job.state == JobState.STARTING and all(r.state != ReplicaState.PENDING for r in replicas):
        transition(job, JobState.RUNNING, "Running", f"all {len(replicas)} replicas started",
                   from_states=[JobState.STARTING])
    elif job.timeout and job.started and (timezone.now() - job.started).total_seconds() > job.timeout:
        if transition(job, JobState.FAILED, "DeadlineExceeded", f"still running after {job.timeout} s"):
            backend.stop(job)
