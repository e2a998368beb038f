"""Replicas waiting to start: one rule set for every backend, applied to the facts its observe()
reports (ReplicaStatus.pending_since, blocked, queued) while the job starts or runs.

- Pending timeout: a replica that has waited longer than the backend's pending_timeout() fails
  the job, with the replica's own reason where something blocks it (ImagePullBackOff,
  Unschedulable, WaitingForPservers, ...), else PendingTimeout. Waiting its turn in a scheduler's
  queue (queued) never times out. A replica's clock starts when its backend says it began to
  wait, and never before the job's latest start (a resumed job starts it again).
- Reasons: the job's reason says why a replica waits: a queued replica's reason and message as
  they are (the scheduler's, the same for every replica it holds), a blocked one's prefixed with
  the replica's name. The job keeps the reason it shows while some replica still waits for it, so
  replicas that take turns do not flip it (each change is an event); once no replica waits for a
  reason, the job's own (Launching, Running) returns. A replica that only waits for others
  (trainers for their pservers) is shown only while none of those others has a reason of its own:
  "pserver-0: scheduling gates" says more than "trainers start when the pservers are ready".

A backend that reports none of these facts (the local one: its launch starts every replica or
fails) is simply never timed out or explained here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from django.utils import timezone

from ..backends.base import Backend, ReplicaStatus
from ..models import Job, JobEvent, JobState, Replica, ReplicaState
from ..state.transitions import set_reason
from . import restarts

# The job's reasons that are the lifecycle's own while it starts or runs: an explanation of a
# waiting replica replaces them, and gives way to them again.
OWN_REASONS = frozenset({"Launching", "Running", "Restarting", "StoppingForRestart"})
Waiting = list[tuple[Replica, ReplicaStatus]]


def check(job: Job, backend: Backend, replicas: Sequence[Replica],
          statuses: Mapping[tuple[str, int], ReplicaStatus]) -> bool:
    """Apply both rules to the replicas observed waiting; True when the job failed."""
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        return False
    waiting = [(r, statuses[(r.role, r.index)]) for r in replicas
               if r.state == ReplicaState.PENDING and statuses.get((r.role, r.index)) is not None
               and statuses[(r.role, r.index)].state == ReplicaState.PENDING]
    if timed_out(job, backend, waiting):
        return True
    explain(job, waiting)
    return False


def timed_out(job: Job, backend: Backend, waiting: Waiting) -> bool:
    timeout = backend.pending_timeout()
    if timeout is None or not waiting:
        return False
    start, now = _started(job), timezone.now()
    for replica, status in sorted(waiting, key=lambda w: not w[1].blocked):  # a blocked one's reason first
        since = max(start, status.pending_since or start)
        if status.queued or (now - since).total_seconds() <= timeout:
            continue
        reason = status.reason if status.blocked and status.reason else "PendingTimeout"
        detail = f"{status.reason}: {status.message}" if status.message else status.reason or "still pending"
        restarts.fail(job, backend, reason, f"{replica.name} did not start within {timeout} s. {detail}")
        return True
    return False


def explain(job: Job, waiting: Waiting) -> None:
    # Queued ones first (the scheduler's reason is the job's), then in the replicas' order.
    shown = sorted(((r, s) for r, s in waiting if s.blocked or s.queued),
                   key=lambda w: (not w[1].queued, w[0].role, w[0].index))
    shown = [w for w in shown if not w[1].behind_others] or shown
    if not shown:
        if job.reason not in OWN_REASONS:
            set_reason(job, *(("Launching", "starting the replicas") if job.state == JobState.STARTING
                              else ("Running", "all replicas started")))
        return
    told = [(_message(r, s), s) for r, s in shown]
    # The reason shown, while some replica still waits for it; the same replica's, if still so.
    kept = [(m, s) for m, s in told if s.reason == job.reason]
    same = [(m, s) for m, s in kept if m == job.message]
    message, status = (same or kept or told)[0]
    set_reason(job, status.reason, message)


def _message(replica: Replica, status: ReplicaStatus) -> str:
    return status.message if status.queued else f"{replica.name}: {status.message}"


def _started(job: Job) -> datetime:
    """When the job last began to start its replicas (its first start, or a resume)."""
    latest = (JobEvent.objects.filter(job=job, replica=None, state=JobState.STARTING).order_by("-created")
              .values_list("created", flat=True).first())
    return latest or job.created
