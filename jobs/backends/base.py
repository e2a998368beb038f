"""The one interface every backend implements; the lifecycle, the tasks and the watch loop only
talk to this, and find a datacenter's backend through jobs/backends/registry.py."""

from __future__ import annotations

import os
import shutil
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from launcher import fdtree
from quotas.services import Capacity, effective_quota

from ..live.usage import Usage

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from accounts.models import Datacenter
    from pfs.paths import PfsPath

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
    # Backends that restart failed replicas themselves (Backend.restarts_replicas): how many times
    # the cluster has restarted this one, and why it last failed; None where not known.
    restarts: int | None = None
    last_exit_code: int | None = None
    last_message: str = ""
    # How often its process was restarted in place before this status (a crash-looping container):
    # the replica's restart count, not a restart of the job's restart policy.
    crash_restarts: int = 0
    # Facts about a Pending replica, for the lifecycle's one rule set (jobs/lifecycle/waiting.py):
    # since when it waits (None: since the job started); whether something keeps it from starting
    # that its reason explains (shown on the job while it waits, the job's reason if it times out);
    # whether it waits its turn in a scheduler's queue (shown on the job, never a pending timeout);
    # whether it only waits for other replicas (trainers for their pservers), whose own reasons,
    # where they have one, say more and are shown on the job instead.
    pending_since: datetime | None = None
    blocked: bool = False
    queued: bool = False
    behind_others: bool = False


@dataclass(frozen=True)
class Preparation:
    """A job's runtime being made in the background (Backend.prepare returned False), as its
    backend observes it; the lifecycle decides (jobs/lifecycle/preparing.py)."""

    state: str  # PREPARING (under way), PENDING (waiting to start), READY or FAILED
    reason: str = ""
    message: str = ""
    what: str = "the runtime"  # what is being made, for the user's message
    pending_since: datetime | None = None  # PENDING: since when it waits (its pending timeout counts from then)


PREPARING, PENDING, READY, FAILED = "Preparing", "Pending", "Ready", "Failed"


class WatchContext(Protocol):
    """What the watch loop (manage.py watch_jobs) gives each backend's watcher: the lifecycle
    and the live-log push live above the backends, so they are handed down, not imported."""

    def jobs_to_watch(self) -> QuerySet[Job]:
        """Jobs whose replicas may still change."""

    def sync(self, job: Job) -> None:
        """Record the job's observed replica states and move the job on (jobs/lifecycle/sync.py)."""

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
    # True when the backend itself restarts a failed replica in replica mode (a Kubernetes Job's
    # backoffLimitPerIndex), within the job's max_restarts and permanent exit codes, reporting
    # ReplicaStatus.restarts and a replica Failed only once it gives up. False: the lifecycle
    # decides each restart and calls restart().
    restarts_replicas = False

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

    @classmethod
    def check_cluster(cls, name: str, config: dict[str, Any], kubeconfig: str) -> None:
        """Raise ValueError if the cluster a datacenter's settings name lacks what they need
        (asked when the datacenter is saved). Optional: nothing to check by default."""
        return

    def isolation(self) -> list[str]:
        """What this datacenter enforces on its jobs, line by line, for the admin (none said: [])."""
        return []

    def pending_timeout(self) -> int | None:
        """Seconds a replica may wait to start before the job fails (jobs/lifecycle/waiting.py);
        None: no limit (its launch either starts it or fails)."""
        return None

    @classmethod
    def capacity(cls) -> Capacity:
        """What the machines this backend runs jobs on have, where the operator set no figures for
        the queue (None: no limit, the cluster's scheduler decides)."""
        return Capacity(None, None, None)

    @abstractmethod
    def prepare(self, job: Job, heartbeat: Callable[[], None]) -> bool:
        """Make the runtime (package copy, environment from requirements.txt). Idempotent. True
        once it is ready; False when it is being made in the background (a cluster's image
        build): the launch ends there, the job stays Building, and its backend's preparation()
        tells the lifecycle when the launch may continue."""

    def preparation(self, job: Job) -> Preparation | None:
        """How the runtime prepare() left to the background is coming on; None: nothing is
        being made, or nothing is known of it here (another process observes it)."""
        return None

    @abstractmethod
    def launch(self, job: Job) -> None:
        """Start every replica that is not started yet. Idempotent."""

    @abstractmethod
    def stop(self, job: Job, replicas: Iterable[Replica] | None = None) -> None:
        """Terminate the given replicas (all by default): graceful, then forced. Idempotent."""

    @abstractmethod
    def restart(self, job: Job, replicas: Iterable[Replica]) -> None:
        """Run these replicas again as a new attempt each (their `restarts` already counts it), with
        the same index and environment. Called by the lifecycle once the failed attempt is stopped
        and its backoff has passed; a gang restart passes every replica. Idempotent per attempt."""

    @abstractmethod
    def suspend(self, job: Job) -> None:
        """Stop every replica gracefully (SIGTERM first: time to checkpoint) and free what the job
        holds on the cluster, keeping what resuming needs (package copy, runtime). Resume is a
        new launch() of the queued job. Idempotent."""

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
    """Copy a tree of the service's own (no job can change it meanwhile) so that `dest` either
    does not exist or is complete."""
    if dest.exists():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    fdtree.rmtree(tmp)
    shutil.copytree(src, tmp, symlinks=True)
    os.rename(tmp, dest)


def snapshot_package(job: Job, dest: Path) -> None:
    """The job's own copy of its PFS package, taken once: later edits in PFS do not reach it.
    Its user's running jobs change the home meanwhile, so it is copied by descriptor from the
    package opened beneath the home (pfs.storage.copy_tree): a directory swapped for a link is
    never entered, and links, hard-linked files and special files are left out."""
    from pfs import storage
    from pfs.paths import PathError, resolve

    if dest.exists():
        return
    try:
        src = resolve(job.user, job.package).open(storage.DIRECTORY)
    except PathError as e:
        raise LaunchError("PackageUnavailable", f"{job.package}: {e.message}") from e
    except OSError as e:
        raise LaunchError("PackageUnavailable", f"{job.package} is not a directory any more ({e.strerror})") from e
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        fdtree.rmtree(tmp)
        tmp.mkdir(mode=0o700)
        try:
            _copy_package(job, src, tmp)
        except BaseException:
            fdtree.rmtree(tmp)
            raise
        os.rename(tmp, dest)
    finally:
        os.close(src)


def _copy_package(job: Job, src: int, tmp: Path) -> None:
    """The open package `src` into the new directory `tmp`, which takes its mode."""
    from pfs import storage
    from pfs.paths import PathError

    dst = os.open(tmp, storage.DIRECTORY)
    try:
        os.fchmod(dst, stat.S_IMODE(os.fstat(src).st_mode) | 0o700)  # as copy_tree makes the levels below
        # A package at jobs/<name>/ (where uploads go) holds the job's checkpoints of earlier
        # runs: the job reads them from PADDLE_CHECKPOINT_DIR, its copies need none of them.
        storage.copy_tree(src, dst, _bounded(job), leave_out=_checkpoints(job))
    except PathError as e:
        raise LaunchError("PackageUnavailable", f"{job.package}: {e.message}") from e
    finally:
        os.close(dst)


def _bounded(job: Job) -> Callable[[int], None]:
    """The copy's charge: a running job can make a sparse file of a terabyte in the package at
    no cost on disk, and the copy writes it out in full, so it stops at the owner's storage quota
    (a package that fits the home fits that)."""
    limit = effective_quota(job.user, job.datacenter).storage_bytes
    copied = 0

    def charge(size: int) -> None:
        nonlocal copied
        copied += size
        if copied > limit:
            raise LaunchError("PackageTooLarge", f"{job.package} holds more than your storage quota "
                                                 f"({limit} bytes): a file there was made larger meanwhile")

    return charge


def _checkpoints(job: Job) -> list[tuple[int, int]]:
    from pfs import storage
    from pfs.paths import PathError

    try:
        fd = checkpoint_path(job).open(storage.DIRECTORY)
    except (PathError, OSError):
        return []  # none yet (or a link: the copy skips links anyway)
    try:
        return [fdtree.ident(os.fstat(fd))]
    finally:
        os.close(fd)


def checkpoint_path(job: Job) -> PfsPath:
    """The job's PADDLE_CHECKPOINT_DIR in its user's home (contract.checkpoint_subpath)."""
    from pfs.paths import home

    from . import contract

    return home(job.user, job.datacenter.name).child(contract.checkpoint_subpath(job))


def ensure_checkpoint_dir(job: Job) -> Path:
    """Create the job's checkpoint directory race-free below its user's home, so the job finds
    it even when it cannot create the levels above. Called at every launch: the user may have
    removed it meanwhile."""
    from pfs.paths import PathError
    from pfs.storage import make_dirs

    target = checkpoint_path(job)
    try:
        make_dirs(target)
    except PathError as e:
        raise LaunchError("CheckpointDirUnavailable", f"{target.virtual}: {e.message}") from e
    return target.disk
