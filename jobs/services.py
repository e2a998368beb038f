"""What users can do with jobs. The pages, /api/v2, the legacy /api/v1 and the admin all call
these; none of them holds job logic of its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from paddleweb import health
from pfs import packages
from pfs.paths import PathError, home
from quotas.services import lock_admissions

from . import logstore, spec
from .models import ACTIVE_STATES, Job, JobEvent, JobState, Replica
from .transitions import transition
from .validation import admission_errors, validate_submission

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.core.files.uploadedfile import UploadedFile


def visible_jobs(user: User) -> QuerySet[Job]:
    return Job.objects.filter(user=user, deleting=False).select_related("datacenter", "user")


def waiting_reason(job: Job) -> str:
    """Why a queued job is not moving on when the service itself is the cause ("" when it is not)."""
    if job.state != JobState.QUEUED or "worker" not in health.missing_processes():
        return ""
    return "no worker is running: the job starts as soon as one does"


def submit_job(user: User, data: Mapping[str, Any]) -> Job:
    """Validate and queue a job whose package is already in PFS. Raises ValidationError."""
    cleaned = validate_submission(user, data)
    return _create(user, cleaned)


def submit_with_upload(user: User, data: Mapping[str, Any], files: Sequence[UploadedFile[bytes]]) -> Job:
    """Validate, put the uploaded package (files, or one .zip/.tar.gz) at jobs/<name>/ in the
    user's home, and queue the job. On any error nothing is left behind."""
    if not files:
        raise ValidationError({"files": ["choose the package's files, or one .zip or .tar.gz"]})
    cleaned = validate_submission(user, {**data, "package": _package_path(user, data)}, package_pending=True)
    dest = home(user, cleaned["datacenter"].name).child("jobs", cleaned["name"])
    try:
        packages.save_package(dest, files)  # reserved against the storage quota as it is written
    except PathError as e:
        raise ValidationError({"files": [e.message]}) from e
    try:
        return _create(user, {**cleaned, "package": dest.virtual})
    except ValidationError:
        packages.remove_package(dest)
        raise


def _package_path(user: User, data: Mapping[str, Any]) -> str:
    """Where an uploaded package goes; a bad name is reported on the name field alone."""
    dc = data.get("datacenter") or settings.DEFAULT_DATACENTER
    name = str(data.get("name") or "").strip()
    if not spec.valid_name(name):
        name = "pending"
    return f"/pfs/{dc}/home/{user.get_username()}/jobs/{name}"


def _create(user: User, cleaned: dict[str, Any]) -> Job:
    """Admit and queue: the quota check and the new job that counts against it are one
    transaction holding the user's admission lock, so parallel submissions cannot all fit."""
    from .tasks import launch_job

    try:
        with transaction.atomic():
            lock_admissions(user)
            errors = admission_errors(user, cleaned)
            if errors:
                raise ValidationError({k: [v] for k, v in errors.items()})
            job = Job.objects.create(user=user, **cleaned)
            Replica.objects.bulk_create(
                [Replica(job=job, role=Replica.Role.PSERVER, index=i) for i in range(job.pservers)]
                + [Replica(job=job, role=Replica.Role.TRAINER, index=i) for i in range(job.trainers)]
            )
            JobEvent.objects.create(job=job, state=JobState.QUEUED, reason="Submitted",
                                    message=f"{job.pservers} pservers, {job.trainers} trainers")
    except IntegrityError:
        # Two submissions with one name raced past validation; the constraint decided.
        raise ValidationError({"name": [f"you already have a job named '{cleaned['name']}'"]}) from None
    transaction.on_commit(lambda: launch_job.delay(job.pk))
    return job


def kill_job(job: Job) -> bool:
    """Stop a job: its replicas get SIGTERM, then SIGKILL after the grace period. False if the
    job had already ended."""
    from .tasks import stop_job

    killed = transition(job, JobState.KILLED, "Killed", "killed by the user")
    transaction.on_commit(lambda: stop_job.delay(job.pk))
    return killed


def delete_job(job: Job) -> None:
    """Kill if needed, hide the job at once, and remove its processes, files and logs in the
    background (history goes with it, like `paddlectl kill -rm`)."""
    from .tasks import delete_job_task

    if job.state in ACTIVE_STATES:
        transition(job, JobState.KILLED, "Killed", "killed by the user (deleted)")
    Job.objects.filter(pk=job.pk).update(deleting=True)
    transaction.on_commit(lambda: delete_job_task.delay(job.pk))


def replica_log(replica: Replica, *, offset: int | None = None, lines: int | None = None) -> logstore.LogChunk:
    """From a byte offset (to resume a follow), or the last `lines` lines (default 100). Raises
    ValidationError for an offset or a line count out of range."""
    try:
        if offset is not None:
            chunk = logstore.read(replica, offset)
        else:
            chunk = logstore.tail(replica, 100 if lines is None else lines)
    except ValueError as e:
        raise ValidationError({"offset" if offset is not None else "lines": [str(e)]}) from None
    return dataclasses.replace(chunk, notice=logstore.notice(replica))
