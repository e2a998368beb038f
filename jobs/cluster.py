"""The cluster as its users see it (/cluster/, GET /api/v2/cluster/, `paddlectl get cluster`): per
datacenter, its capacity and what the admitted jobs hold, the running jobs, and the queue in order
with each job's reason. Users do not trust each other: another user's job shows as its owner and
resources only, never its name, message or logs; staff see everything."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import F

from accounts.models import Datacenter
from quotas.services import Capacity, Resources, resources_of

from .backends.registry import capacity
from .models import ADMITTED_STATES, Job, JobState

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class ClusterJob:
    id: int
    owner: str
    mine: bool
    shown: bool  # the viewer may see its name, reason and message (theirs, or staff)
    name: str  # "" when not shown
    state: str
    reason: str  # "" when not shown
    message: str  # "" when not shown
    queue_position: int | None
    since: datetime | None  # queued at (queue) or started (running)
    resources: Resources
    trainers: int
    pservers: int


@dataclass
class DatacenterView:
    name: str
    backend: str
    capacity: Capacity
    used: Resources = field(default_factory=Resources)
    running: list[ClusterJob] = field(default_factory=list)
    queue: list[ClusterJob] = field(default_factory=list)

    def dims(self) -> list[tuple[str, int | None, int]]:
        """(resource, capacity or None, held) for the page's bars."""
        return [("cpu", self.capacity.cpu_millicores, self.used.cpu_millicores),
                ("memory", self.capacity.memory_bytes, self.used.memory_bytes),
                ("gpu", self.capacity.gpus, self.used.gpus)]


def _job(job: Job, viewer: User) -> ClusterJob:
    mine = job.user_id == viewer.pk
    shown = mine or viewer.is_staff
    return ClusterJob(
        id=job.pk, owner=job.user.get_username(), mine=mine, shown=shown, name=job.name if shown else "",
        state=job.state, reason=job.reason if shown else "", message=job.message if shown else "",
        queue_position=job.queue_position,
        since=job.queued_at if job.state == JobState.QUEUED else job.started or job.queued_at,
        resources=resources_of(job), trainers=job.trainers, pservers=job.pservers)


def overview(viewer: User) -> list[DatacenterView]:
    """Every datacenter with its running jobs (admitted: building, starting, running) and its queue
    (in admission order: the queue pass's positions, then arrival)."""
    views = {dc.pk: DatacenterView(dc.name, dc.backend, capacity(dc)) for dc in Datacenter.objects.order_by("name")}
    jobs = (Job.objects.filter(state__in=[*ADMITTED_STATES, JobState.QUEUED], deleting=False)
            .select_related("user")
            .order_by(F("queue_position").asc(nulls_last=True), "queued_at", "created", "pk"))
    for job in jobs:
        view = views[job.datacenter_id]
        entry = _job(job, viewer)
        if job.state == JobState.QUEUED:
            view.queue.append(entry)
        else:
            view.running.append(entry)
            view.used += entry.resources
    return list(views.values())
