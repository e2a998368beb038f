"""Celery tasks that drive the backends. Each claims its work with a conditional UPDATE, so a
task delivered twice, or racing the periodic reconcile, does no harm."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Datacenter

from .backends.base import LaunchError
from .backends.registry import get_backend
from .lifecycle import queue, retention
from .lifecycle.sync import sync_job
from .live import logstore
from .models import TERMINAL_STATES, Job, JobState, Replica, ReplicaState
from .state.transitions import transition

log = logging.getLogger(__name__)


def _claim(job_id: int) -> Job | None:
    """Take the launch of a job the queue admitted (Building, no heartbeat yet), or of one whose
    launcher went quiet (crashed). A queued job waits for the queue (jobs/lifecycle/queue.py)."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.LAUNCH_LEASE_SECONDS)
    job = Job.objects.filter(pk=job_id).select_related("datacenter", "user").first()
    if job is None:
        return None
    if job.state == JobState.QUEUED:  # asked to launch a queued job: see whether the queue admits it now
        admit_and_launch(job.datacenter)
        job.refresh_from_db(fields=["state", "reason", "message", "heartbeat"])
    if job.state == JobState.BUILDING and job.heartbeat is None:
        if not Job.objects.filter(pk=job.pk, state=JobState.BUILDING, heartbeat=None).update(heartbeat=now):
            return None
        job.heartbeat = now
        return job
    stale_launch = job.state in (JobState.BUILDING, JobState.STARTING) and job.heartbeat and job.heartbeat < stale
    # Taken over only by the one whose update still finds the stale heartbeat.
    if stale_launch and Job.objects.filter(pk=job.pk, heartbeat=job.heartbeat).update(heartbeat=now):
        log.info("job %s: taking over a stale launch", job.pk)
        job.heartbeat = now
        return job
    return None


def admit_and_launch(datacenter: Datacenter) -> queue.Pass:
    """One admission pass (in the caller's transaction, if any); the jobs it admits are launched
    once that commits."""
    result = queue.admit(datacenter)
    for job_id in result.admitted:
        transaction.on_commit(lambda job_id=job_id: launch_job.delay(job_id))  # type: ignore[misc]
    return result


@shared_task(acks_late=True)
def admit_queue(datacenter_id: int) -> None:
    """Queued by every job that leaves the admitted states, so the next one starts at once."""
    dc = Datacenter.objects.filter(pk=datacenter_id).first()
    if dc is not None:
        admit_and_launch(dc)


@shared_task(acks_late=True)
def launch_job(job_id: int) -> None:
    job = _claim(job_id)
    if job is None:
        return

    def heartbeat() -> None:
        Job.objects.filter(pk=job.pk, state__in=[JobState.BUILDING, JobState.STARTING]).update(heartbeat=timezone.now())

    backend = get_backend(job.datacenter)
    try:
        if job.state == JobState.BUILDING:
            if not backend.prepare(job, heartbeat):
                # Made in the background (a cluster's image build): this worker is free again,
                # and the launch continues once the watcher sees it ready (lifecycle/preparing.py).
                Job.objects.filter(pk=job.pk, state=JobState.BUILDING).update(heartbeat=None)
                return
            if not transition(job, JobState.STARTING, "Launching", "starting the replicas",
                              from_states=[JobState.BUILDING], heartbeat=timezone.now()):
                return  # killed meanwhile
        backend.launch(job)
        # The watcher may already have seen the replicas start and moved the job to Running.
        if not Job.objects.filter(pk=job.pk, state__in=[JobState.STARTING, JobState.RUNNING]).update(heartbeat=None):
            backend.stop(job)  # killed while replicas were starting: stop what this launch started
    except LaunchError as e:
        if transition(job, JobState.FAILED, e.reason, e.message):
            backend.stop(job)
        return
    except Exception as e:
        log.exception("job %s: launch failed", job.pk)
        if transition(job, JobState.FAILED, "LaunchFailed", f"{type(e).__name__}: {e}"):
            backend.stop(job)
        return
    sync_job(job)


@shared_task(acks_late=True)
def stop_job(job_id: int) -> None:
    job = Job.objects.filter(pk=job_id).select_related("datacenter", "user").first()
    if job is not None:
        get_backend(job.datacenter).stop(job)
        sync_job(job)


@shared_task(acks_late=True)
def suspend_job_task(job_id: int) -> None:
    job = Job.objects.filter(pk=job_id, state=JobState.SUSPENDED).select_related("datacenter", "user").first()
    if job is not None:
        get_backend(job.datacenter).suspend(job)
        sync_job(job)


@shared_task
def purge_finished_jobs() -> int:
    """The retention policy's periodic pass (JOB_RETENTION_DAYS)."""
    return retention.purge_expired()


@shared_task(acks_late=True)
def delete_job_task(job_id: int, checkpoints: bool = False) -> None:
    job = Job.objects.filter(pk=job_id, deleting=True).select_related("datacenter", "user").first()
    if job is None:
        return
    get_backend(job.datacenter).delete(job)
    logstore.delete_job(job.pk)
    if checkpoints:  # after the processes that write them are gone
        from .checkpoints import remove

        remove(job)
    job.delete()


def jobs_to_watch() -> QuerySet[Job]:
    """Jobs whose replicas may still change: launched and active, or ended or suspended with some
    replica not known to be done (one may have been started by a launch racing the kill: it gets
    stopped)."""
    # Each part through an index (the jobs' state; the replicas that may still change): as one OR
    # across a join with DISTINCT, PostgreSQL read every job ever run, twice a watcher pass.
    active = Job.objects.filter(state__in=[JobState.STARTING, JobState.RUNNING]).order_by().values("pk")
    unsettled = Replica.objects.filter(state__in=[ReplicaState.RUNNING, ReplicaState.PENDING],
                                       job__state__in=[*TERMINAL_STATES, JobState.SUSPENDED]).order_by().values("job")
    return Job.objects.filter(pk__in=active.union(unsettled)).select_related("datacenter", "user")


@shared_task
def reconcile() -> None:
    """The safety net: re-drive every job whose owner (task, worker, watcher) may have been lost."""
    stale = timezone.now() - timedelta(seconds=settings.LAUNCH_LEASE_SECONDS)
    for dc in Datacenter.objects.filter(jobs__state=JobState.QUEUED).distinct():
        admit_and_launch(dc)
    # Admitted, but the launch task was lost (a duplicate finds the launch taken and does nothing).
    for job_id in Job.objects.filter(state=JobState.BUILDING, heartbeat=None).values_list("pk", flat=True):
        launch_job.delay(job_id)
    for job_id in Job.objects.filter(state__in=[JobState.BUILDING, JobState.STARTING],
                                     heartbeat__lt=stale).values_list("pk", flat=True):
        launch_job.delay(job_id)
    for job_id in Job.objects.filter(deleting=True).values_list("pk", flat=True):
        delete_job_task.delay(job_id)
    for job in jobs_to_watch():
        try:
            sync_job(job)
        except Exception:
            log.exception("job %s: reconcile failed", job.pk)
