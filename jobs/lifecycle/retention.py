"""Finished-job retention: JOB_RETENTION_DAYS after a job finished, its working copies (the
backend's files or cluster objects) and its logs are removed; the job, its replicas and events
stay, marked `purged`, until the user deletes it. Run periodically by Celery beat."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from ..backends.registry import get_backend
from ..live import logstore
from ..models import TERMINAL_STATES, Job, ReplicaState

log = logging.getLogger(__name__)


def expired() -> list[int]:
    """Ids of the finished jobs past the retention period, not purged yet (none when it is off)."""
    days = settings.JOB_RETENTION_DAYS
    if not days:
        return []
    cutoff = timezone.now() - timedelta(days=days)
    return list(Job.objects.filter(state__in=TERMINAL_STATES, finished__lt=cutoff, purged=None, deleting=False)
                .exclude(replicas__state__in=[ReplicaState.RUNNING, ReplicaState.PENDING])
                .values_list("pk", flat=True))


def purge(job_id: int) -> bool:
    """Remove one expired job's working copies and logs, then mark it purged. Removing is
    idempotent, so the mark comes last: a pass that dies half-way leaves the job unmarked for the
    next pass, two passes at once both remove harmlessly, and the conditional UPDATE counts it once."""
    job = (Job.objects.select_related("datacenter", "user")
           .filter(pk=job_id, purged=None, deleting=False, state__in=TERMINAL_STATES).first())
    if job is None:
        return False
    get_backend(job.datacenter).delete(job)
    logstore.delete_job(job.pk)
    return bool(Job.objects.filter(pk=job_id, purged=None).update(purged=timezone.now()))


def purge_expired() -> int:
    """Purge every expired job; how many were purged. A job that fails is logged and retried on
    the next pass; the others go on."""
    done = 0
    for job_id in expired():
        try:
            done += purge(job_id)
        except Exception:
            log.exception("job %s: retention purge failed", job_id)
    return done


def notice(job: Job) -> str:
    """What the job page and the API say in place of a purged job's logs."""
    if job.purged is None:
        return ""
    return (f"The logs and working files were removed on {job.purged:%Y-%m-%d} by the retention policy "
            f"(kept {settings.JOB_RETENTION_DAYS:g} days after a job finishes).")
