"""The queue: which queued jobs of a datacenter start now, and why the others wait.

One admission pass (`admit`) holds the datacenter's lock, adds up what the admitted jobs hold
(per user and in all), and goes through the queued jobs in order:
  1. priority, highest first (bounded per user by the quota's max_priority at submission);
  2. fair share: of the users' next jobs, the one whose user holds the smallest dominant share of
     the datacenter (the largest fraction of its CPU, memory or GPUs) goes first;
  3. first in, first out within a user (queued_at, then id).
A job that fits both its user's quota and the free capacity is admitted at once with the same
conditional QUEUED -> BUILDING claim every other transition uses; the launch task then takes it.
A job that does not fit is passed over (smaller jobs behind it may start: backfill) and keeps its
position and the reason in words. Starvation: once a job has waited QUEUE_BACKFILL_SECONDS, nothing
may pass it any more - if it waits for capacity, no later job in the datacenter starts before it; if
it waits for its user's quota, none of that user's later jobs does.

Passes run on submission and resume (in the same transaction, so admission is atomic with the new
job), whenever a job leaves the admitted states (jobs/signals.py queues `admit_queue` on the state
change jobs/state/transitions.py publishes), and on the periodic reconcile. A pass that runs twice
finds nothing more to do.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Datacenter
from quotas.models import Quota
from quotas.services import RESOURCE_FIELDS, Capacity, Resources, quota_errors, resources_of

from ..backends.registry import capacity
from ..models import ADMITTED_STATES, Job, JobState
from ..state.transitions import set_reason, transition

if TYPE_CHECKING:
    from django.contrib.auth.models import User

ADMITTED_REASON, ADMITTED_MESSAGE = "Preparing", "copying the package and preparing the runtime"


@dataclass
class Pass:
    """What one admission pass did: the jobs it admitted, and why each other queued job waits
    (field errors: "__all__", "cpu", "memory", "gpu")."""

    admitted: list[int] = field(default_factory=list)
    waiting: dict[int, dict[str, str]] = field(default_factory=dict)


@dataclass
class _Books:
    """What the admitted jobs hold, kept up to date as the pass admits more."""

    cap: Capacity
    held: defaultdict[int, Resources] = field(default_factory=lambda: defaultdict(Resources))
    running: Counter[int] = field(default_factory=Counter)
    total: Resources = Resources()

    def add(self, user_id: int, request: Resources) -> None:
        self.held[user_id] += request
        self.running[user_id] += 1
        self.total += request

    def share(self, user_id: int) -> float:
        limited = any(x is not None for x in (self.cap.cpu_millicores, self.cap.memory_bytes, self.cap.gpus))
        # With no limit at all (a Kubernetes datacenter by default) the number of jobs stands in.
        return self.cap.dominant_share(self.held[user_id]) if limited else float(self.running[user_id])


def admit(datacenter: Datacenter) -> Pass:
    """Admit what fits from the datacenter's queue now; record position and reason of the rest."""
    result = Pass()
    with transaction.atomic():
        # The datacenter's row serialises passes (PostgreSQL; SQLite's IMMEDIATE transactions
        # serialise every writer already), so two passes never admit into the same free room.
        dc = Datacenter.objects.select_for_update().get(pk=datacenter.pk)
        books = _Books(capacity(dc))
        for job in Job.objects.filter(datacenter=dc, state__in=ADMITTED_STATES).only("user_id", *RESOURCE_FIELDS):
            books.add(job.user_id, resources_of(job))
        queued = (Job.objects.filter(datacenter=dc, state=JobState.QUEUED, deleting=False)
                  .only("user_id", "name", "priority", "queued_at", "created", "state", "reason", "message",
                        "queue_position", "datacenter_id", *RESOURCE_FIELDS))
        lines: defaultdict[int, deque[Job]] = defaultdict(deque)
        for job in sorted(queued, key=within_user):
            lines[job.user_id].append(job)
        quotas = _quotas(dc, set(lines))
        patience = timezone.now() - timedelta(seconds=settings.QUEUE_BACKFILL_SECONDS)
        reserved: Job | None = None  # waits for capacity and may not be passed by anyone
        user_reserved: dict[int, Job] = {}  # waits for its user's quota: that user's later jobs wait too
        position = 0

        def next_user(user_id: int) -> tuple[int, float, object, int]:
            return turn(lines[user_id][0], books.share(user_id))

        while lines:
            user_id = min(lines, key=next_user)
            job = lines[user_id].popleft()
            if not lines[user_id]:
                del lines[user_id]
            request = resources_of(job)
            over_quota = quota_errors(quotas[user_id], books.held[user_id], books.running[user_id], request)
            short = books.cap.shortfalls(books.total, request, dc.name)
            ahead = reserved or user_reserved.get(user_id)
            if ahead is not None:
                why = {"__all__": f"waiting behind job {ahead.name}, which has waited longest and keeps its place"}
            else:
                why = over_quota | short
            if not why:
                if transition(job, JobState.BUILDING, ADMITTED_REASON, ADMITTED_MESSAGE,
                              from_states=[JobState.QUEUED], heartbeat=None):
                    books.add(user_id, request)
                    result.admitted.append(job.pk)
                continue  # else killed meanwhile: no longer queued
            position += 1
            result.waiting[job.pk] = why
            _record(job, position, "Waiting" if ahead is not None else "QuotaFull" if over_quota else "NoCapacity",
                    why)
            if ahead is None and (job.queued_at or job.created) < patience:
                if over_quota:
                    user_reserved[user_id] = job
                elif short:
                    reserved = job
    return result


def held(user: User, datacenter: Datacenter) -> tuple[Resources, int]:
    """Resources held by the user's admitted jobs in the datacenter (queued and suspended ones hold
    nothing), and how many there are."""
    total = Resources()
    jobs = Job.objects.filter(user=user, datacenter=datacenter, state__in=ADMITTED_STATES)
    count = 0
    for job in jobs.only(*RESOURCE_FIELDS):
        count += 1
        total += resources_of(job)
    return total, count


def queued(user: User, datacenter: Datacenter) -> int:
    """How many of the user's jobs wait in the datacenter's queue (quota max_queued_jobs)."""
    return Job.objects.filter(user=user, datacenter=datacenter, state=JobState.QUEUED).count()


def within_user(job: Job) -> tuple[int, object, int]:
    """A job's place among its user's queued jobs: priority (highest first), then first in, first out."""
    return (-job.priority, job.queued_at or job.created, job.pk)


def turn(head: Job, share: float) -> tuple[int, float, object, int]:
    """A user's place among the users with queued jobs, by `head`, their next job: its priority
    (highest first), then the user's `share` of the datacenter (smallest first), then its age."""
    return (-head.priority, share, head.queued_at or head.created, head.pk)


def _quotas(dc: Datacenter, user_ids: set[int]) -> dict[int, Quota]:
    """Each user's effective quota (quotas.services.effective_quota, for all of them in one query)."""
    rows = {q.user_id: q for q in Quota.objects.filter(Q(user_id__in=user_ids) | Q(user=None), datacenter=dc)}
    default = rows.get(None) or Quota(datacenter=dc)
    return {u: rows.get(u) or default for u in user_ids}


def _record(job: Job, position: int, reason: str, why: dict[str, str]) -> None:
    if job.queue_position != position:
        Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(queue_position=position)
        job.queue_position = position
    set_reason(job, reason, "; ".join(why.values()))
