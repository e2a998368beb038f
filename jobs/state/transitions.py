"""Job state transitions: each a conditional UPDATE on the current state, recorded as an event.

The watcher, the periodic reconcile and a task running twice can all call these at once and the
outcome is the same. The lifecycle and the tasks call them; backends never do (they report facts:
pyproject.toml's import contract "backends-report-facts").

Every committed state change is published once as core.events.job_state_changed: the queue, the
storage accounting and the notifications follow it from there, none of them named here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from core import events

from ..live import notify
from ..models import ACTIVE_STATES, TERMINAL_STATES, Job, JobEvent, JobState, Replica
from . import timings


def transition(job: Job, to: str, reason: str, message: str = "", *, from_states: Iterable[str] = ACTIVE_STATES,
               **fields: Any) -> bool:
    """Move `job` to state `to` if it is in one of `from_states`; record why. False if it was not."""
    now = timezone.now()
    if to == JobState.RUNNING:
        fields.setdefault("started", now)
    if to != JobState.QUEUED:
        fields.setdefault("queue_position", None)  # only a queued job has a place in the queue
    if to in TERMINAL_STATES:
        fields.setdefault("finished", now)
        fields.setdefault("heartbeat", None)
        if job.started is None and "started" not in fields:
            # Replicas that ended before any sync saw them all running take the job from Starting
            # straight to its end: it ran all the same, from its first replica's start.
            first = Replica.objects.filter(job=job, started__isnull=False).aggregate(first=Min("started"))["first"]
            if first is not None:
                fields["started"] = first
    with transaction.atomic():
        updated = Job.objects.filter(pk=job.pk, state__in=from_states).update(
            state=to, reason=reason, message=message, **fields)
        if updated:
            JobEvent.objects.create(job=job, state=to, reason=reason, message=message)
    if updated:
        job.state, job.reason, job.message = to, reason, message
        for key, value in fields.items():
            setattr(job, key, value)
        transaction.on_commit(lambda: notify.job_changed(job.pk))
        if to == JobState.RUNNING:
            transaction.on_commit(lambda: timings.observe_running(job), robust=True)  # a metric never fails a job
        transaction.on_commit(lambda: events.publish(events.job_state_changed, sender=type(job), job=job, state=to,
                                                     ended=to in TERMINAL_STATES), robust=True)
    return bool(updated)


def set_reason(job: Job, reason: str, message: str) -> None:
    """Why an active job is waiting, on the job itself (its state does not change)."""
    if job.reason == reason and job.message == message:
        return
    with transaction.atomic():
        updated = Job.objects.filter(pk=job.pk, state=job.state).update(reason=reason, message=message)
        if updated:
            JobEvent.objects.create(job=job, state=job.state, reason=reason, message=message)
    if updated:
        job.reason, job.message = reason, message
        transaction.on_commit(lambda: notify.job_changed(job.pk))
