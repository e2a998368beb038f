"""A job's runtime made in the background: its backend's prepare() started it and returned, so no
worker waits for it (a Kubernetes image build: jobs/backends/kubernetes/runtime.py), and the job
stays Building. On each of the watcher's passes over the job its backend reports how it is
coming on (Backend.preparation), and the rules here decide, for every backend alike:

- ready: the launch continues. `runtime_ready` is sent, and its receiver (jobs/signals.py)
  queues the launch task again; its prepare() then finds the runtime made and it starts the
  replicas. Only a launch nobody holds is continued (a launch task holding it goes on by
  itself); the periodic reconcile queues every unheld Building job's launch again, so one whose
  continuation was lost is not stuck.
- failed: the job fails with the backend's reason and message (the build log's end).
- waiting to start longer than the backend's pending_timeout(): the job fails with the reason
  that keeps it waiting, else PendingTimeout.
"""

from __future__ import annotations

from django.dispatch import Signal
from django.utils import timezone

from core.events import publish

from ..backends.base import FAILED, PENDING, READY, Backend, Preparation
from ..models import Job, JobState
from . import restarts

# Sent with `job` when a Building job's runtime is ready and nobody holds its launch.
runtime_ready = Signal()


def check(job: Job, backend: Backend) -> None:
    """Move a Building job on as its backend observes the runtime being made."""
    status = backend.preparation(job)
    if status is None:
        return
    if status.state == READY:
        if Job.objects.filter(pk=job.pk, state=JobState.BUILDING, heartbeat=None).exists():
            publish(runtime_ready, sender=Job, job=job)
    elif status.state == FAILED:
        restarts.fail(job, backend, status.reason, status.message)
    elif status.state == PENDING:
        _timed_out(job, backend, status)


def _timed_out(job: Job, backend: Backend, status: Preparation) -> None:
    timeout = backend.pending_timeout()
    if timeout is None or status.pending_since is None:
        return
    if (timezone.now() - status.pending_since).total_seconds() > timeout:
        restarts.fail(job, backend, status.reason or "PendingTimeout",
                      f"{status.what} did not start within {timeout} s: {status.message}")
