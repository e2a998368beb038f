"""Quota lookup, usage of running jobs, and the check every submission passes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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


def usage(user: User, datacenter: Datacenter) -> tuple[Resources, int]:
    """Resources held by the user's active jobs in the datacenter, and how many there are."""
    from jobs.models import ACTIVE_STATES, Job

    total = Resources()
    jobs = Job.objects.filter(user=user, datacenter=datacenter, state__in=ACTIVE_STATES)
    count = 0
    for job in jobs.only("mode", "trainers", "pservers", "cpu", "memory", "gpu", "pscpu", "psmemory"):
        count += 1
        total += job_resources(mode=job.mode, trainers=job.trainers, pservers=job.pservers, cpu=job.cpu,
                               memory=job.memory, gpu=job.gpu, pscpu=job.pscpu, psmemory=job.psmemory)
    return total, count


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


def check_job_quota(user: User, datacenter: Datacenter, request: Resources) -> dict[str, str]:
    """Field errors for a job that would take the user over quota (empty when it fits). Only
    binding under lock_admissions(), in the transaction that creates the job."""
    quota = effective_quota(user, datacenter)
    used, running = usage(user, datacenter)
    errors: dict[str, str] = {}
    if running + 1 > quota.max_running_jobs:
        errors["__all__"] = (f"quota exceeded: {running} of {quota.max_running_jobs} jobs already running; "
                             "wait for one to finish or kill one")
    if used.cpu_millicores + request.cpu_millicores > quota.cpu_millicores:
        errors["cpu"] = (f"quota exceeded: this job needs {format_cpu(request.cpu_millicores)} CPU, "
                         f"used {format_cpu(used.cpu_millicores)} of {format_cpu(quota.cpu_millicores)}")
    if used.memory_bytes + request.memory_bytes > quota.memory_bytes:
        errors["memory"] = (f"quota exceeded: this job needs {format_bytes(request.memory_bytes)} memory, "
                            f"used {format_bytes(used.memory_bytes)} of {format_bytes(quota.memory_bytes)}")
    if used.gpus + request.gpus > quota.gpus:
        errors["gpu"] = f"quota exceeded: this job needs {request.gpus} GPU, used {used.gpus} of {quota.gpus}"
    return errors
