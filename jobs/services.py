"""What users can do with jobs. The pages, /api/v2, the legacy /api/v1 and the admin all call
these; none of them holds job logic of its own."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core import health
from pfs import packages
from pfs.paths import PathError, home
from quotas.services import effective_quota, lock_admissions, queue_full

from . import checkpoints, logs, spec
from .lifecycle import queue
from .live import logstore
from .models import ACTIVE_STATES, ADMITTED_STATES, REPLICA_DONE, Job, JobEvent, JobState, Replica, ReplicaState
from .state.attempts import new_attempt
from .state.transitions import transition
from .submission.validation import validate_submission

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.core.files.uploadedfile import UploadedFile

    from accounts.models import Datacenter


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


def submit_with_upload(user: User, data: Mapping[str, Any], files: Sequence[UploadedFile[bytes]], *,
                       cloned_from: Job | None = None) -> Job:
    """Validate, put the uploaded package (files, or one .zip/.tar.gz) at jobs/<name>/ in the
    user's home, and queue the job. On any error nothing is left behind. `cloned_from`: the job
    it was edited from ("Edit and resubmit" with a new package)."""
    if not files:
        raise ValidationError({"files": ["choose the package's files, or one .zip or .tar.gz"]})
    cleaned = validate_submission(user, {**data, "package": _package_path(user, data)}, package_pending=True)
    dest = home(user, cleaned["datacenter"].name).child("jobs", cleaned["name"])
    try:
        packages.save_package(dest, files)  # reserved against the storage quota as it is written
    except PathError as e:
        raise ValidationError({"files": [e.message]}) from e
    try:
        return _create(user, {**cleaned, "package": dest.virtual, "cloned_from": cloned_from})
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
    """Queue the job; the datacenter's admission pass starts it if it fits (jobs/lifecycle/queue.py). A
    fail-fast job is admitted by a pass in this very transaction (which holds the datacenter's
    lock, so parallel submissions cannot all fit), or refused with the queue's reasons and nothing
    of it left."""
    try:
        with transaction.atomic():
            lock_admissions(user)
            if not cleaned.get("fail_fast"):  # a fail-fast job starts or is refused: it never waits
                _ensure_queue_room(user, cleaned["datacenter"])
            job = Job.objects.create(user=user, queued_at=timezone.now(), **cleaned)
            Replica.objects.bulk_create(
                [Replica(job=job, role=Replica.Role.PSERVER, index=i) for i in range(job.pservers)]
                + [Replica(job=job, role=Replica.Role.TRAINER, index=i) for i in range(job.trainers)]
            )
            JobEvent.objects.create(job=job, state=JobState.QUEUED, reason="Submitted", message=replica_counts(job))
            if checkpoints.found(job):
                JobEvent.objects.create(job=job, state=JobState.QUEUED, reason=checkpoints.FOUND,
                                        message=checkpoints.found_message(job))
            if job.fail_fast:
                from .tasks import admit_and_launch

                why = admit_and_launch(job.datacenter).waiting.get(job.pk)
                if why is not None:
                    raise ValidationError({k: [f"{v}; not queued (fail fast)"] for k, v in why.items()})
                job.refresh_from_db()
            else:
                enqueue(job)
    except IntegrityError:
        # Two submissions with one name raced past validation; the constraint decided.
        raise ValidationError({"name": [f"you already have a job named '{cleaned['name']}'"]}) from None
    return job


def _ensure_queue_room(user: User, datacenter: Datacenter) -> None:
    """Refuse one job more waiting to start than the user's quota allows (call under
    lock_admissions, so parallel submissions cannot all pass the count)."""
    why = queue_full(effective_quota(user, datacenter), queue.queued(user, datacenter))
    if why:
        raise ValidationError({field: [message] for field, message in why.items()})


def enqueue(job: Job) -> None:
    """Once the current transaction commits, run the admission pass of the job's datacenter
    (submitted, resumed): the job starts if it fits, else waits with its position and reason."""
    from .tasks import admit_queue

    transaction.on_commit(lambda: admit_queue.delay(job.datacenter_id))


def kill_job(job: Job, *, by: str = "") -> bool:
    """Stop a job: its replicas get SIGTERM, then SIGKILL after the grace period. False if the
    job had already ended. `by`: the staff member who killed another user's job."""
    from .tasks import stop_job

    killed = transition(job, JobState.KILLED, "Killed", f"killed by {by} (staff)" if by else "killed by the user")
    transaction.on_commit(lambda: stop_job.delay(job.pk))
    return killed


def delete_job(job: Job, *, checkpoints: bool = False) -> None:
    """Kill if needed, hide the job at once, and remove its processes, files and logs in the
    background (history goes with it, like `paddlectl kill -rm`). Its checkpoint directory stays
    (a job submitted again under the name resumes from it) unless `checkpoints`."""
    from .tasks import delete_job_task

    if job.state in ACTIVE_STATES:
        transition(job, JobState.KILLED, "Killed", "killed by the user (deleted)")
    Job.objects.filter(pk=job.pk).update(deleting=True)
    transaction.on_commit(lambda: delete_job_task.delay(job.pk, checkpoints=checkpoints))


def replica_counts(job: Job) -> str:
    """"1 pserver, 2 trainers", "4 trainers"."""
    counts = [(job.pservers, "pserver"), (job.trainers, "trainer")]
    return ", ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in counts if n or what == "trainer")


def source_spec(job: Job) -> dict[str, Any]:
    """The job's spec fields as a submission would give them (refs by name)."""
    data = {f.name: getattr(job, f.name) for f in spec.SPEC if f.kind != "ref"}
    data["env"] = dict(job.env)
    data["datacenter"] = job.datacenter.name
    data["registry"] = job.registry.name if job.registry else ""
    return data


def free_name(user: User, name: str) -> str:
    """A name none of the user's jobs has, made from `name`: fit -> fit-2, fit-2 -> fit-3."""
    numbered = re.fullmatch(r"(.*)-(\d+)", name)
    base, n = (numbered[1], int(numbered[2]) + 1) if numbered else (name, 2)
    taken = set(Job.objects.filter(user=user, name__startswith=base[:spec.NAME_MAX - 8])
                .values_list("name", flat=True))
    for i in range(n, n + 1000):
        suffix = f"-{i}"
        candidate = base[:spec.NAME_MAX - len(suffix)].rstrip("-.") + suffix
        if candidate not in taken and spec.valid_name(candidate):
            return candidate
    return name  # validation then says the name is taken


def clone_job(user: User, job: Job, changes: Mapping[str, Any]) -> Job:
    """Submit again: the job's spec with `changes` overlaid, validated like any submission; a free
    name ("<name>-2") unless one is given. The new job records where it came from. Raises
    ValidationError (an unknown field too)."""
    if not isinstance(changes, Mapping):
        raise ValidationError("the changes are an object of job field names and values")
    unknown = sorted(str(k) for k in changes if k not in spec.FIELDS)
    if unknown:
        raise ValidationError({k: ["not a job field"] for k in unknown})
    data = {**source_spec(job), **changes}
    if not changes.get("name"):
        data["name"] = free_name(user, job.name)
    cleaned = validate_submission(user, data)
    return _create(user, {**cleaned, "cloned_from": job})


def suspend_job(job: Job) -> None:
    """Stop the job and free its resources, keeping it (state Suspended) to be resumed: a queued job
    leaves the queue at once; a started one's replicas get SIGTERM (time to checkpoint) and end
    Terminated (reason Suspended). Raises ValidationError when the job cannot be suspended."""
    from .tasks import suspend_job_task

    message = "suspended by the user; resume queues it again"
    with transaction.atomic():
        if transition(job, JobState.SUSPENDED, "Suspended", message, from_states=[JobState.QUEUED]):
            # Nothing was started (a launch claims the job from Queued first): its replicas end here.
            job.replicas.filter(state=ReplicaState.PENDING).update(
                state=ReplicaState.TERMINATED, reason="Suspended", message="the job was suspended before it started")
            return
        if not transition(job, JobState.SUSPENDED, "Suspended", message, from_states=ADMITTED_STATES,
                          heartbeat=None):
            raise ValidationError({"state": [f"only a queued or running job can be suspended (it is {job.state})"]})
    transaction.on_commit(lambda: suspend_job_task.delay(job.pk))


def resume_job(job: Job) -> None:
    """Queue a suspended job again; every replica starts as a new attempt (from its checkpoint,
    where the program keeps one). Raises ValidationError unless the job is suspended and its
    replicas have all stopped."""
    not_suspended = ValidationError({"state": [f"only a suspended job can be resumed (it is {job.state})"]})
    with transaction.atomic():
        lock_admissions(job.user)
        if not Job.objects.filter(pk=job.pk, state=JobState.SUSPENDED).exists():
            raise not_suspended
        _ensure_queue_room(job.user, job.datacenter)
        if job.replicas.exclude(state__in=REPLICA_DONE).exists():
            raise ValidationError({"state": ["the job's replicas are still stopping; resume it in a moment"]})
        # A suspended job holds no quota: the queue admits it again like a submission.
        if not transition(job, JobState.QUEUED, "Resumed", "resumed by the user; waiting to start again",
                          from_states=[JobState.SUSPENDED], queued_at=timezone.now(), heartbeat=None):
            raise not_suspended
        new_attempt(list(job.replicas.all()))
    enqueue(job)


def replica_log(replica: Replica, *, offset: int | None = None, lines: int | None = None) -> logstore.LogChunk:
    """From a byte offset (to resume a follow), or the last `lines` lines (default 100). Raises
    ValidationError for an offset or a line count out of range."""
    return logs.read(replica.job, replica, offset=offset, lines=lines)
