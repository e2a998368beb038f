"""What jobs does when a job's state changes (core.events.job_state_changed), and when a Building
job's runtime made in the background is ready (jobs/lifecycle/preparing.py)."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from core.events import job_state_changed

from .lifecycle.preparing import runtime_ready
from .live import wake
from .models import JobState
from .tasks import admit_queue, launch_job


@receiver(job_state_changed, dispatch_uid="jobs.admit_queue")
def admit_next(sender: Any, job: Any, state: str, ended: bool, **kwargs: Any) -> None:
    """What the job held (if it was admitted) is free: the queue's next jobs may start now."""
    if ended or state == JobState.SUSPENDED:
        admit_queue.delay(job.datacenter_id)


@receiver(job_state_changed, dispatch_uid="jobs.wake_watcher")
def wake_watcher(sender: Any, job: Any, state: str, ended: bool, **kwargs: Any) -> None:
    """The watch loop looks at once (jobs/live/wake.py): an admitted or started job's replicas are
    seen running, an ended one's are stopped, without waiting for its next pass."""
    wake.wake(job.pk)


@receiver(runtime_ready, dispatch_uid="jobs.continue_launch")
def continue_launch(sender: Any, job: Any, **kwargs: Any) -> None:
    """The launch that left the runtime to the background continues: it starts the replicas."""
    launch_job.delay(job.pk)
