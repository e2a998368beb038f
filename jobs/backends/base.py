"""The one interface every backend implements; the services and tasks only talk to this."""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


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


class Backend(ABC):
    def __init__(self, datacenter):
        self.datacenter = datacenter

    @abstractmethod
    def prepare(self, job, heartbeat: Callable[[], None]) -> None:
        """Make the runtime (package copy, environment from requirements.txt). Idempotent."""

    @abstractmethod
    def launch(self, job) -> None:
        """Start every replica that is not started yet. Idempotent."""

    @abstractmethod
    def stop(self, job, replicas: Iterable | None = None) -> None:
        """Terminate the given replicas (all by default): graceful, then forced. Idempotent."""

    @abstractmethod
    def delete(self, job) -> None:
        """Remove every trace of the job's processes or objects. Idempotent."""

    @abstractmethod
    def observe(self, job) -> dict[tuple[str, int], ReplicaStatus]:
        """Current status of each replica, keyed by (role, index)."""


def copy_tree_atomic(src: Path, dest: Path) -> None:
    """Copy a tree so that `dest` either does not exist or is complete."""
    if dest.exists():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, symlinks=True)
    os.rename(tmp, dest)


def snapshot_package(job, dest: Path) -> None:
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


def get_backend(datacenter) -> Backend:
    if datacenter.backend == "local":
        from .local import LocalBackend

        return LocalBackend(datacenter)
    if datacenter.backend == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(datacenter)
    raise LaunchError("NoBackend", f"datacenter {datacenter.name}: the {datacenter.backend} backend is not available")
