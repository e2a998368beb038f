"""The restart policy: what the lifecycle does when a replica of a starting or running job fails.

- An exit code in the job's `permanent_exit_codes` fails the job at once (PermanentExitCode).
- `replica` mode: a failed trainer alone gets a new attempt (same index and environment) after an
  exponential backoff, at most `max_restarts` times per index; while it waits it is Pending with
  reason BackOff, and the job stays as it was (Running).
- `gang` mode, and a failed parameter server in either mode (pservers hold the model's state):
  every replica is stopped, then every one gets a new attempt after the backoff; at most
  `max_restarts` such restarts per job (`Job.restarts`).
- Past the limit the job fails: RestartLimit (or ReplicaFailed when no restarts are allowed).

Every restart is an event (reason Restarting) with the exit code and the last log lines that
caused it. Each step is a conditional UPDATE (a replica's attempt, the job's restart count, a
restart's due time), so the watcher and the reconcile may drive the same job at once: exactly one
of them performs each restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .. import spec
from ..backends.base import Backend, LaunchError, ReplicaStatus
from ..live import failures, logstore
from ..models import REPLICA_DONE, Job, JobEvent, JobState, Replica, ReplicaState
from ..state.attempts import new_attempt
from ..state.transitions import set_reason, transition

FAILURE_LOG_LINES = 20
FAILURE_LOG_WINDOW = 400  # the log's end searched for the traceback
RUNNING_STATES = (JobState.STARTING, JobState.RUNNING)


def max_restarts(job: Job) -> int:
    return job.datacenter.default_max_restarts if job.max_restarts is None else job.max_restarts


def backoff_seconds(restart: int) -> float:
    """How long restart number `restart` (1, 2, ...) waits: the base, doubling, capped."""
    return float(min(settings.RESTART_BACKOFF_SECONDS * 2 ** (restart - 1), settings.RESTART_BACKOFF_MAX_SECONDS))


def own_restarts(job: Job, replica: Replica) -> int:
    """Restarts of this replica alone (every gang restart also counts on each replica)."""
    return max(replica.restarts - job.restarts, 0)


# Failures a restart would only repeat: the job fails with the replica's reason.
PERMANENT_REASONS = ("DiskLimit",)


def failure_message(replica: Replica, head: str = "") -> str:
    # The traceback, not the shutdown chatter after it (jobs/live/failures.py).
    lines = failures.excerpt(logstore.tail(replica, FAILURE_LOG_WINDOW).text, FAILURE_LOG_LINES).rstrip()
    head = head or f"{replica.name} {replica.message or 'failed'}"
    return f"{head}. Last log lines:\n{lines}" if lines else head


def fail(job: Job, backend: Backend, reason: str, message: str) -> None:
    if transition(job, JobState.FAILED, reason, message):
        backend.stop(job)


def _permanent_codes(job: Job) -> set[int]:
    try:
        return spec.exit_codes(job.permanent_exit_codes)
    except ValueError:  # validated on submit; an admin's edit must not stop the lifecycle
        return set()


def handle_failures(job: Job, backend: Backend, replicas: Sequence[Replica]) -> bool:
    """Decide what the failed replicas of a starting or running job mean. True when there were
    any: the job is failing, restarting or waiting for its replicas to stop."""
    failed = [r for r in replicas if r.state == ReplicaState.FAILED]
    if not failed:
        return False
    for r in failed:
        if r.reason in PERMANENT_REASONS:  # it would do the same again
            fail(job, backend, r.reason, failure_message(r, f"{r.name} {r.message}: not restarted"))
            return True
    permanent = _permanent_codes(job)
    for r in failed:
        if r.exit_code in permanent:
            fail(job, backend, "PermanentExitCode", failure_message(
                r, f"{r.name} exited with code {r.exit_code}, which the job marks permanent: not restarted"))
            return True
    limit = max_restarts(job)
    if job.restart_mode == "gang" or any(r.role == Replica.Role.PSERVER for r in failed):
        _gang_restart(job, backend, replicas, failed[0], limit)
        return True
    if backend.restarts_replicas:
        # The cluster restarts trainers itself: a Failed one is one it gave up on.
        r = failed[0]
        fail(job, backend, "RestartLimit" if own_restarts(job, r) else "ReplicaFailed", failure_message(
            r, f"{r.name} {r.message or 'failed'} after {own_restarts(job, r)} restarts (max_restarts {limit})"))
        return True
    for r in failed:
        if own_restarts(job, r) >= limit:
            _give_up(job, backend, r, own_restarts(job, r), limit)
            return True
    for r in failed:
        _restart_later(job, r, limit)
    return True


def _give_up(job: Job, backend: Backend, cause: Replica, used: int, limit: int) -> None:
    if not limit:
        fail(job, backend, "ReplicaFailed", failure_message(cause))
    else:
        fail(job, backend, "RestartLimit", failure_message(
            cause, f"{cause.name} {cause.message or 'failed'} after {used} of {limit} restarts"))


def _restart_later(job: Job, r: Replica, limit: int) -> None:
    """A new attempt of the failed replica, started by start_due once its backoff has passed."""
    n = own_restarts(job, r) + 1
    delay = backoff_seconds(n)
    at = timezone.now() + timedelta(seconds=delay)
    cause = failure_message(r, f"{_how(r)}: restart {n} of {limit} in {delay:g} s")
    with transaction.atomic():
        JobEvent.objects.create(job=job, replica=r, state=ReplicaState.FAILED, reason="Restarting", message=cause)
        if not new_attempt([r], restart=True, restart_at=at, reason="BackOff",
                           message=f"restart {n} of {limit} at {_clock(at)} (attempt {r.attempt + 1})"):
            transaction.set_rollback(True)  # someone else restarted it: theirs is the event


def _gang_restart(job: Job, backend: Backend, replicas: Sequence[Replica], cause: Replica, limit: int) -> None:
    """Stop every replica; once all have stopped, a new attempt of each after the backoff."""
    if job.restarts >= limit:
        _give_up(job, backend, cause, job.restarts, limit)
        return
    n = job.restarts + 1
    live = [r for r in replicas if r.state not in REPLICA_DONE and r.state != ReplicaState.PENDING]
    if live:
        set_reason(job, "StoppingForRestart", f"{cause.name} {cause.message or 'failed'}: stopping every replica "
                                      f"to restart the job ({n} of {limit})")
        backend.stop(job, live)
        return  # the next pass sees them stopped
    if job.heartbeat is not None:
        return  # the first launch is still starting replicas: new attempts now would race it
    delay = backoff_seconds(n)
    at = timezone.now() + timedelta(seconds=delay)
    message = f"restart {n} of {limit}: every replica starts again at {_clock(at)}"
    with transaction.atomic():
        # The claim: of two callers, one moves the count on; the other's update matches nothing.
        if not Job.objects.filter(pk=job.pk, restarts=job.restarts, state__in=RUNNING_STATES).update(
                restarts=n, reason="Restarting", message=message):
            return
        JobEvent.objects.create(job=job, replica=cause, state=job.state, reason="Restarting", message=failure_message(
            cause, f"{_how(cause)}: every replica restarts ({n} of {limit}) in {delay:g} s"))
        new_attempt(replicas, restart=True, restart_at=at, reason="BackOff", from_states=None,
                    message=f"gang restart {n} of {limit} at {_clock(at)}")
    job.restarts, job.reason, job.message = n, "Restarting", message


def start_due(job: Job, backend: Backend, replicas: Sequence[Replica]) -> None:
    """Start the new attempts whose backoff has passed, all in one backend.restart() (a gang's
    are due together). They are claimed by moving their due time on by the launch lease, all or
    none (one transaction, in a fixed order): a caller that dies before the replicas run is retried
    after the lease, and a gang is never split between two callers."""
    now = timezone.now()
    due = [r for r in replicas if r.state == ReplicaState.PENDING and r.restart_at and r.restart_at <= now]
    if not due:
        return
    lease = now + timedelta(seconds=settings.LAUNCH_LEASE_SECONDS)
    with transaction.atomic():
        for r in sorted(due, key=lambda r: r.pk):
            if not Replica.objects.filter(pk=r.pk, attempt=r.attempt, restart_at=r.restart_at).update(restart_at=lease):
                transaction.set_rollback(True)  # another caller has them
                return
    claimed = due
    for r in claimed:
        r.restart_at = lease
    try:
        backend.restart(job, claimed)
    except LaunchError as e:
        fail(job, backend, e.reason, e.message)
    except Exception as e:  # noqa: BLE001  # the job says why; the watcher goes on
        fail(job, backend, "RestartFailed", f"{type(e).__name__}: {e}")


def record_cluster_restarts(job: Job, replica: Replica, status: ReplicaStatus) -> bool:
    """A backend that restarts replicas itself (Backend.restarts_replicas) reports how often it
    did: each new one is counted on the replica and recorded as a Restarting event."""
    if status.restarts is None or status.restarts <= own_restarts(job, replica):
        return False
    total = job.restarts + status.restarts
    with transaction.atomic():
        if not Replica.objects.filter(pk=replica.pk, restarts=replica.restarts).update(restarts=total):
            return False
        replica.restarts = total
        head = (f"{replica.name} restarted by the cluster ({status.restarts} of {max_restarts(job)}): "
                f"exit code {status.last_exit_code} {status.last_message}").rstrip()
        JobEvent.objects.create(job=job, replica=replica, state=replica.state, reason="Restarting",
                                message=failure_message(replica, head))
    return True


def pserver_gone_message(pserver: Replica, trainers: Sequence[Replica]) -> str:
    """Why a job whose parameter server ended by itself fails: pservers never exit on their own."""
    running = sum(1 for t in trainers if t.state not in REPLICA_DONE)
    how = "exited 0" if pserver.state == ReplicaState.SUCCEEDED else (pserver.message or pserver.state.lower())
    head = (f"{pserver.name} {how} while {running} of {len(trainers)} trainers were still running: parameter "
            f"servers must run until every trainer has finished")
    return failure_message(pserver, head)


def _how(r: Replica) -> str:
    """How the replica failed, with its exit code where its message does not give it."""
    how = f"{r.name} {r.message or 'failed'}"
    if r.exit_code is not None and f"code {r.exit_code}" not in how:
        how += f" (exit code {r.exit_code})"
    return how


def _clock(at: datetime) -> str:
    return timezone.localtime(at).strftime("%H:%M:%S")
