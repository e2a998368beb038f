"""Quota lookup, what admitted jobs hold, a datacenter's capacity, and the checks the queue admits
jobs by (jobs/lifecycle/queue.py); the reason texts users see come from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Q

from .models import Quota
from .units import cpu_millicores, format_bytes, format_cpu, memory_bytes

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from accounts.models import Datacenter


@dataclass(frozen=True)
class Resources:
    cpu_millicores: int = 0
    memory_bytes: int = 0
    gpus: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores + other.cpu_millicores,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
        )


    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millicores - other.cpu_millicores,
            self.memory_bytes - other.memory_bytes,
            self.gpus - other.gpus,
        )


@dataclass(frozen=True)
class Capacity:
    """What a datacenter's jobs may hold together; None: no limit (the cluster's scheduler decides)."""

    cpu_millicores: int | None
    memory_bytes: int | None
    gpus: int | None

    def shortfalls(self, held: Resources, request: Resources, datacenter: str) -> dict[str, str]:
        """Field errors for a request that does not fit what is left ("" key: none)."""
        errors: dict[str, str] = {}
        for field, cap, used, need, fmt, unit in self.dims(held, request):
            if cap is not None and used + need > cap:
                errors[field] = (f"needs {fmt(need)} {unit}, {fmt(max(cap - used, 0))} free "
                                 f"in datacenter {datacenter}")
        return errors

    def dominant_share(self, held: Resources) -> float:
        """The largest fraction of any limited resource held (fair share orders users by it)."""
        shares = [used / cap for _f, cap, used, _n, _fmt, _u in self.dims(held, Resources()) if cap]
        return max(shares, default=0.0)

    def dims(self, held: Resources, request: Resources) -> list[tuple[str, int | None, int, int, Any, str]]:
        return [("cpu", self.cpu_millicores, held.cpu_millicores, request.cpu_millicores, format_cpu, "CPU"),
                ("memory", self.memory_bytes, held.memory_bytes, request.memory_bytes, format_bytes, "memory"),
                ("gpu", self.gpus, held.gpus, request.gpus, str, "GPU")]


def capacity(datacenter: Datacenter, machine: Capacity) -> Capacity:
    """The operator's figures where set; else `machine`, what the datacenter's backend says its
    machines have (jobs/backends/registry.py asks it: locally this machine's CPUs and memory and no
    GPUs, on Kubernetes no limit)."""
    return Capacity(
        _first(datacenter.capacity_cpu_millicores, machine.cpu_millicores),
        _first(datacenter.capacity_memory_bytes, machine.memory_bytes),
        _first(datacenter.capacity_gpus, machine.gpus),
    )


def _first(value: int | None, default: int | None) -> int | None:
    return value if value is not None else default


def effective_quota(user: User, datacenter: Datacenter) -> Quota:
    """The user's own quota, else the datacenter default, else the built-in defaults (unsaved)."""
    rows = {q.user_id: q for q in Quota.objects.filter(Q(user=user) | Q(user=None), datacenter=datacenter)}
    return rows.get(user.pk) or rows.get(None) or Quota(datacenter=datacenter)


def job_resources(*, mode: str, trainers: int, pservers: int, cpu: str, memory: str, gpu: int,
                  pscpu: str, psmemory: str) -> Resources:
    trainer = Resources(cpu_millicores(cpu), memory_bytes(memory), gpu)
    total = Resources(trainer.cpu_millicores * trainers, trainer.memory_bytes * trainers, gpu * trainers)
    if mode == "ps" and pservers:
        total += Resources(cpu_millicores(pscpu) * pservers, memory_bytes(psmemory) * pservers, 0)
    return total


def resources_of(job: Any) -> Resources:
    """What a job (a Job, or anything with its resource fields) holds once admitted."""
    return job_resources(mode=job.mode, trainers=job.trainers, pservers=job.pservers, cpu=job.cpu,
                         memory=job.memory, gpu=job.gpu, pscpu=job.pscpu, psmemory=job.psmemory)


RESOURCE_FIELDS = ("mode", "trainers", "pservers", "cpu", "memory", "gpu", "pscpu", "psmemory")


def lock_admissions(user: User) -> None:
    """Serialise the admissions of one user until the current transaction ends: check the quota,
    then create what counts against it, with no other admission in between. PostgreSQL locks
    the user's row; SQLite has no row locks, but the project opens every transaction
    IMMEDIATE, which already serialises all writers (settings.DATABASES)."""
    conn = transaction.get_connection()
    if not conn.in_atomic_block:
        raise RuntimeError("lock_admissions() holds only inside transaction.atomic()")
    if conn.vendor == "sqlite" and conn.settings_dict["OPTIONS"].get("transaction_mode") != "IMMEDIATE":
        raise ImproperlyConfigured("SQLite admissions need OPTIONS transaction_mode IMMEDIATE")
    get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk").get()


def never_fits(quota: Quota, cap: Capacity, request: Resources, priority: int, datacenter: str) -> dict[str, str]:
    """Field errors for a job that could not start even with the datacenter to itself: it is
    refused at submission instead of waiting forever."""
    errors: dict[str, str] = {}
    if quota.max_running_jobs == 0:
        errors["__all__"] = "your quota allows no running jobs in this datacenter"
    limits = Capacity(quota.cpu_millicores, quota.memory_bytes, quota.gpus)
    for field, limit, _used, need, fmt, unit in limits.dims(Resources(), request):
        if limit is not None and need > limit:
            errors[field] = f"needs {fmt(need)} {unit}, more than your whole quota of {fmt(limit)}"
    for field, limit, _used, need, fmt, unit in cap.dims(Resources(), request):
        if limit is not None and need > limit:
            errors.setdefault(field, f"needs {fmt(need)} {unit}, more than datacenter {datacenter} has "
                                     f"({fmt(limit)})")
    if priority > quota.max_priority:
        errors["priority"] = f"at most {quota.max_priority} (your quota's maximum priority)"
    return errors


def queue_full(quota: Quota, queued: int) -> dict[str, str]:
    """Field errors for a job that would make one too many of its user's jobs waiting to start."""
    if queued < quota.max_queued_jobs:
        return {}
    return {"__all__": f"{queued} of {quota.max_queued_jobs} queued jobs used (quota): wait until some start, "
                       "or kill some"}


def quota_errors(quota: Quota, used: Resources, running: int, request: Resources) -> dict[str, str]:
    """Field errors for a job that would take the user over quota now (empty when it fits)."""
    errors: dict[str, str] = {}
    if running + 1 > quota.max_running_jobs:
        errors["__all__"] = f"{running} of {quota.max_running_jobs} running jobs used (quota)"
    if used.cpu_millicores + request.cpu_millicores > quota.cpu_millicores:
        errors["cpu"] = (f"needs {format_cpu(request.cpu_millicores)} CPU, {format_cpu(used.cpu_millicores)} "
                         f"of {format_cpu(quota.cpu_millicores)} used (quota)")
    if used.memory_bytes + request.memory_bytes > quota.memory_bytes:
        errors["memory"] = (f"needs {format_bytes(request.memory_bytes)} memory, {format_bytes(used.memory_bytes)} "
                            f"of {format_bytes(quota.memory_bytes)} used (quota)")
    if used.gpus + request.gpus > quota.gpus:
        errors["gpu"] = f"needs {request.gpus} GPU, {used.gpus} of {quota.gpus} used (quota)"
    return errors
