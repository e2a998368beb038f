"""The one interface every backend implements; the lifecycle, the tasks and the watch loop only
talk to this, and find a datacenter's backend through jobs/backends/registry.py."""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from accounts.models import Datacenter

    from ..models import Job, Replica


class LaunchError(Exception):
    """The job cannot be started; `reason` is a short CamelCase code shown on the job."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class ReplicaStatus:
    state: str  # a ReplicaState value
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    pod: str = ""
    host: str = ""
    started: datetime | None = None
    finished: datetime | None = None


@dataclass(frozen=True)
class Usage:
    """One replica's resource use at one moment. CPU comes either as a cumulative counter
    (`cpu_seconds`, local processes: the percentage follows from the previous sample) or as a
    rate the backend measured itself (`cpu_percent`, 100 = one core: Kubernetes' metrics API)."""

    memory_bytes: int
    cpu_seconds: float | None = None
    cpu_percent: float | None = None


class WatchContext(Protocol):
    """What the watch loop (manage.py watch_jobs) gives each backend's watcher: the lifecycle
    and the live-log push live above the backends, so they are handed down, not imported."""

    def jobs_to_watch(self) -> QuerySet[Job]:
        """Jobs whose replicas may still change."""

    def sync(self, job: Job) -> None:
        """Record the job's observed replica states and move the job on (jobs/lifecycle.py)."""

    def push_logs(self, job: Job) -> None:
        """Send the job's new log output to its live viewers."""

    def record_usage(self, job: Job) -> None:
        """Sample the CPU and memory of the job's running replicas (Backend.usage), at most
        every USAGE_SAMPLE_SECONDS per job; call it on every tick for each running job."""


class Watcher(ABC):
    """Watches every datacenter of one backend from the watch loop; `tick` runs every interval."""

    def __init__(self, backend: str):
        self.backend = backend  # the datacenters' `backend` value this watcher serves

    @abstractmethod
    def start(self) -> None:
        """Once, before the first tick: say what this host cannot do, open connections."""

    @abstractmethod
    def tick(self, ctx: WatchContext) -> None:
        """Observe the backend's jobs, call ctx.sync on those that changed, push their logs."""

    @abstractmethod
    def stop(self) -> None:
        """Release threads and connections; the loop is ending."""


class Backend(ABC):
    def __init__(self, datacenter: Datacenter):
        self.datacenter = datacenter

    @classmethod
    @abstractmethod
    def watcher(cls, backend: str) -> Watcher:
        """The watcher of every datacenter whose `backend` is `backend`."""

    @classmethod
    @abstractmethod
    def check_config(cls, name: str, config: dict[str, Any]) -> None:
        """Raise ValueError if a datacenter's `config` is not valid for this backend."""

    def isolation(self) -> list[str]:
        """What this datacenter enforces on its jobs, line by line, for the admin (none said: [])."""
        return []

    @abstractmethod
    def prepare(self, job: Job, heartbeat: Callable[[], None]) -> None:
        """Make the runtime (package copy, environment from requirements.txt). Idempotent."""

    @abstractmethod
    def launch(self, job: Job) -> None:
        """Start every replica that is not started yet. Idempotent."""

    @abstractmethod
    def stop(self, job: Job, replicas: Iterable[Replica] | None = None) -> None:
        """Terminate the given replicas (all by default): graceful, then forced. Idempotent."""

    @abstractmethod
    def delete(self, job: Job) -> None:
        """Remove every trace of the job's processes or objects. Idempotent."""

    @abstractmethod
    def observe(self, job: Job) -> dict[tuple[str, int], ReplicaStatus]:
        """Current status of each replica, keyed by (role, index)."""

    def usage(self, job: Job) -> dict[tuple[str, int], Usage]:
        """CPU and memory of each running replica, keyed by (role, index); replicas it cannot
        measure are left out. Optional: a backend without a way to measure returns {}."""
        return {}


def copy_tree_atomic(src: Path, dest: Path) -> None:
    """Copy a tree so that `dest` either does not exist or is complete."""
    if dest.exists():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, symlinks=True)
    os.rename(tmp, dest)


def snapshot_package(job: Job, dest: Path) -> None:
    """The job's own copy of its PFS package, taken once: later edits in PFS do not reach it."""
    from pfs.paths import PathError, resolve

    if dest.exists():
        return
    try:
        src = resolve(job.user, job.package).ensure_contained()
    except PathError as e:
        raise LaunchError("PackageUnavailable", f"{job.package}: {e.message}") from e
    if not src.is_dir():
        raise LaunchError("PackageUnavailable", f"{job.package} is not a directory any more")
    dest.parent.mkdir(parents=True, exist_ok=True)
    copy_tree_atomic(src, dest)
