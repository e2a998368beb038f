"""How long a job waited, observed once when it reaches Running (from its job-level events), into
the histograms that /metrics serves (core/metrics_store.py)."""

from __future__ import annotations

from core import metrics_store

from ..models import Job, JobEvent, JobState


def observe_running(job: Job) -> None:
    """Record the queue wait (submission until it left Queued) and submission until Running."""
    events = list(JobEvent.objects.filter(job=job, replica=None).order_by("created", "id")
                  .values_list("state", "created"))
    submitted = next((at for state, at in events if state == JobState.QUEUED), job.created)
    left_queue = next((at for state, at in events if state != JobState.QUEUED), None)
    running = next((at for state, at in events if state == JobState.RUNNING), None)
    if left_queue is not None:
        metrics_store.observe(metrics_store.QUEUE_WAIT, (left_queue - submitted).total_seconds())
    if running is not None:
        metrics_store.observe(metrics_store.SUBMIT_TO_RUNNING, (running - submitted).total_seconds())
