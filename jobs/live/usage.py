"""Replica resource usage: the watch loop samples each running job's replicas through its
backend (Backend.usage) and keeps the newest USAGE_SAMPLES_KEPT samples per replica, after the
job ends too; the job page and the API read them back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from ..models import Job, Replica, ReplicaSample, ReplicaState


@dataclass(frozen=True)
class Usage:
    """One replica's resource use at one moment. CPU comes either as a cumulative counter
    (`cpu_seconds`, local processes: the percentage follows from the previous sample) or as a
    rate the backend measured itself (`cpu_percent`, 100 = one core: Kubernetes' metrics API)."""

    memory_bytes: int
    cpu_seconds: float | None = None
    cpu_percent: float | None = None


class Point(TypedDict):
    taken: datetime
    cpu_percent: float | None
    memory_bytes: int


def _cpu_percent(usage: Usage, now: datetime, previous: ReplicaSample | None) -> float | None:
    """The backend's own rate, else the counter's growth since the previous sample."""
    if usage.cpu_percent is not None:
        return max(0.0, usage.cpu_percent)
    if usage.cpu_seconds is None or previous is None or previous.cpu_seconds is None:
        return None
    wall = (now - previous.taken).total_seconds()
    used = usage.cpu_seconds - previous.cpu_seconds
    if wall <= 0 or used < 0:  # a process of the replica ended and took its counter along
        return None
    return round(100 * used / wall, 1)


def record(job: Job, measured: dict[tuple[str, int], Usage], now: datetime | None = None) -> list[ReplicaSample]:
    """Store one sample per measured replica of `job`, dropping each one's oldest past the bound."""
    now = now or timezone.now()
    kept: int = settings.USAGE_SAMPLES_KEPT
    saved = []
    for replica in job.replicas.all():
        usage = measured.get((replica.role, replica.index))
        if usage is None:
            continue
        previous = replica.samples.order_by("-taken").first()
        saved.append(ReplicaSample.objects.create(
            replica=replica, taken=now, cpu_percent=_cpu_percent(usage, now, previous),
            cpu_seconds=usage.cpu_seconds, memory_bytes=max(0, usage.memory_bytes)))
        cutoff = replica.samples.order_by("-taken").values_list("taken", flat=True)[kept:kept + 1].first()
        if cutoff is not None:
            replica.samples.filter(taken__lte=cutoff).delete()
    return saved


def sample(job: Job, measure: Callable[[Job], dict[tuple[str, int], Usage]]) -> list[ReplicaSample]:
    """Measure the job's running replicas now (its backend's Backend.usage) and record what could be."""
    if not job.replicas.filter(state=ReplicaState.RUNNING).exists():
        return []
    return record(job, measure(job))


def with_latest(replicas: QuerySet[Replica]) -> QuerySet[Replica]:
    """The replicas with their newest sample read in the same query (for `latest`)."""
    newest = ReplicaSample.objects.filter(replica=OuterRef("pk")).order_by("-taken")
    return replicas.annotate(**{f"usage_{field}": Subquery(newest.values(field)[:1])
                                for field in Point.__annotations__})


def latest(replica: Replica) -> Point | None:
    """The replica's newest sample, or None before the first (no query after `with_latest`)."""
    if hasattr(replica, "usage_taken"):
        annotated: Any = replica  # the fields with_latest added
        if annotated.usage_taken is None:
            return None
        return Point(taken=annotated.usage_taken, cpu_percent=annotated.usage_cpu_percent,
                     memory_bytes=annotated.usage_memory_bytes)
    last = replica.samples.order_by("-taken").first()
    return _point(last) if last else None


def series(replica: Replica) -> list[Point]:
    """Every kept sample of the replica, oldest first."""
    return [_point(s) for s in replica.samples.order_by("taken")]


# Samples further apart than this many sampling intervals were not taken in between (the job
# suspended, its replica waiting to restart): the chart breaks its line there.
GAP_INTERVALS = 4


def chart_series(job: Job) -> dict[str, dict[str, list[float | None]]]:
    """Per replica name: sample times (Unix seconds), CPU % and memory (MiB), for the job page; a
    gap with no samples gets a point of nulls in its middle, so the chart draws no line across it."""
    gap = GAP_INTERVALS * settings.USAGE_SAMPLE_SECONDS
    out: dict[str, dict[str, list[float | None]]] = {}
    for replica in job.replicas.all():
        times: list[float | None] = []
        cpu: list[float | None] = []
        memory: list[float | None] = []
        previous = None
        for p in series(replica):
            at = p["taken"].timestamp()
            if previous is not None and at - previous > gap:
                times.append((at + previous) / 2)
                cpu.append(None)
                memory.append(None)
            times.append(at)
            cpu.append(p["cpu_percent"])
            memory.append(round(p["memory_bytes"] / 2**20, 1))
            previous = at
        out[replica.name] = {"time": times, "cpu": cpu, "memory": memory}
    return out


def _point(s: ReplicaSample) -> Point:
    return {"taken": s.taken, "cpu_percent": s.cpu_percent, "memory_bytes": s.memory_bytes}
