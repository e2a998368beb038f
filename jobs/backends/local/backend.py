"""Local backend: every replica is a process group on this machine, kept by a keeper
(launcher/keeper.py).

With the datacenter's default isolation ("sandbox", see config.py) each replica runs in a
bubblewrap sandbox as its user's job uid, inside its job's network namespace, held to its memory,
CPU and pids limits by a cgroup of its own and to its disk_limit: all set up by the launcher
(launcher/), the one process that keeps root, which this service asks over a unix socket
(launcher_client.py). A machine where the sandbox does not work fails the job with reason
SandboxUnavailable.

Layout under JOBS_ROOT/<job id>/: `package/` (the job's snapshot of its PFS package) and, per
replica, `<role>-<index>/` holding `state/` (the keeper's pid and exit files; `state-<n>` for
later attempts), `work/` (the replica's working directory: its own copy of the package plus
trainer_id/trainer_count) and `tmp/` (its /tmp).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings
from django.db import transaction

from launcher import fdtree
from pfs.paths import PfsPath, resolve
from quotas.services import Capacity

from ...live import logstore
from ...live.usage import Usage
from ...models import Job, Replica, ReplicaState
from .. import contract
from ..base import Backend, LaunchError, ReplicaStatus, ensure_checkpoint_dir, snapshot_package
from . import config, keepers, replicas, runtime, sandbox, usage
from .launcher_client import LauncherError, ask
from .watcher import LocalWatcher

log = logging.getLogger(__name__)

DONE = (ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.TERMINATED)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((keepers.HOST, 0))
        port: int = s.getsockname()[1]
        return port


class LocalBackend(Backend):
    @classmethod
    def watcher(cls, backend: str) -> LocalWatcher:
        return LocalWatcher(backend)

    @classmethod
    def check_config(cls, name: str, config_: dict[str, Any]) -> None:
        config.parse(config_)

    @classmethod
    def capacity(cls) -> Capacity:
        """This machine's CPUs and memory, and no GPUs."""
        return Capacity((os.cpu_count() or 1) * 1000, psutil.virtual_memory().total, 0)

    def isolation(self) -> list[str]:
        """What this datacenter enforces on its jobs on this machine, and what it does not."""
        try:
            cfg = config.parse(self.datacenter.config)
        except config.SettingsError as e:
            return [f"Jobs fail until the config is fixed: {e}"]
        found = sandbox.status()
        if not cfg.sandboxed:
            lines = ["Sandbox OFF (isolation: none): jobs run as the service's user and can read and change "
                     "everything it can, every user's data included. For a single-user machine only."]
        elif found.why:
            lines = [f"Sandbox UNAVAILABLE: jobs fail with SandboxUnavailable. {found.why}"]
        else:
            way_out = ("internet access through slirp4netns (never the host's loopback)" if cfg.internet
                       else "no network access beyond the job's own replicas")
            who = ("under the service's own uid (rootless: user namespaces alone keep it from the service's files)"
                   if found.rootless else "as its user's own uid")
            lines = [f"Sandbox enforced (bubblewrap): every job runs {who} in a network namespace of its own, every "
                     f"replica in its own mount and PID namespace, with no capabilities and a seccomp filter; "
                     f"{way_out}; at most {cfg.disk_limit >> 20} MiB written to its working copy and /tmp."]
        enforced = {"memory": "memory", "cpu": "CPU", "pids": f"pids (at most {cfg.pids_limit} per replica)"}
        lines += [f"Limit enforced: {enforced[c]}" for c in found.enforced]
        lines += [f"Limit NOT enforced: {c}: {reason}" for c, reason in sorted(found.missing.items())]
        return lines

    def settings(self) -> config.LocalSettings:
        try:
            return config.parse(self.datacenter.config)
        except config.SettingsError as e:
            raise LaunchError("BadDatacenterConfig", f"datacenter {self.datacenter.name}: {e}") from e

    def job_dir(self, job: Job) -> Path:
        root: Path = settings.JOBS_ROOT
        return root / str(job.pk)

    def replica_dir(self, replica: Replica) -> Path:
        root: Path = settings.JOBS_ROOT
        return root / str(replica.job_id) / replica.name

    def state_dir(self, replica: Replica) -> Path:
        """The keeper's files of the replica's current attempt (a restart or resume is a new one)."""
        return self.replica_dir(replica) / ("state" if not replica.attempt else f"state-{replica.attempt}")

    # --- prepare ---------------------------------------------------------------------------
    def prepare(self, job: Job, heartbeat: Callable[[], None]) -> bool:
        cfg = self.settings()
        self._check_sandbox(cfg)
        snapshot_package(job, self.job_dir(job) / "package")
        try:
            runtime.ensure_env(self._requirements(job), heartbeat, sandboxed=cfg.sandboxed,
                               log=logstore.build_log_path(job),
                               say=lambda line: logstore.append_build(job, f"paddlecloud: {line}\n".encode()))
        except runtime.RuntimeEnvError as e:
            raise LaunchError("RuntimeEnvFailed", f"{e.message}:\n{e.log_tail}") from e
        return True  # made here, while the launch task waits

    def _requirements(self, job: Job) -> str:
        return keepers.read(self.job_dir(job) / "package" / "requirements.txt") or ""

    # --- launch ----------------------------------------------------------------------------
    def _check_sandbox(self, cfg: config.LocalSettings) -> None:
        if cfg.sandboxed and (why := sandbox.probe()):
            raise LaunchError("SandboxUnavailable", f"local jobs cannot be isolated on this machine: {why}")

    def launch(self, job: Job, only: Iterable[Replica] | None = None) -> None:
        cfg = self.settings()
        self._check_sandbox(cfg)
        try:
            self._launch(job, cfg, only)
        except (LauncherError, sandbox.Unavailable) as e:
            raise LaunchError("SandboxUnavailable", f"local jobs cannot be isolated on this machine: {e}") from e

    def _launch(self, job: Job, cfg: config.LocalSettings, only: Iterable[Replica] | None) -> None:
        self._assign_ports(job)
        all_replicas = list(job.replicas.all())
        wanted = None if only is None else {(r.role, r.index) for r in only}
        topo = contract.Topology(
            pservers=[r.endpoint for r in all_replicas if r.role == Replica.Role.PSERVER],
            trainers=[r.endpoint for r in all_replicas if r.role == Replica.Role.TRAINER],
        )
        bin_dir = runtime.ensure_env(self._requirements(job), sandboxed=cfg.sandboxed)
        home = self._home(job)
        home.disk.mkdir(parents=True, exist_ok=True)
        ensure_checkpoint_dir(job)
        if cfg.sandboxed:  # what the service put there since is the job's too
            ask("share", root="pfs", path=str(home.disk), uid=sandbox.job_uid(job.user))
        # Keepers start side by side (each is an interpreter starting up, and the launcher answers
        # requests in parallel); then every one must have written its pid, so observe() never
        # sees a gap.
        starting: list[tuple[Replica, subprocess.Popen[bytes] | None]] = []
        requests: list[replicas.Requests] = []
        for replica in all_replicas if wanted is None else [r for r in all_replicas if (r.role, r.index) in wanted]:
            if not Job.objects.filter(pk=job.pk, state=job.state).exists():
                break  # killed or failed while we were starting replicas
            state = self.state_dir(replica)
            if (state / "keeper.pid").exists() or (state / "stop").exists():
                continue  # started or stopped already
            state.mkdir(parents=True, exist_ok=True)
            work, tmp = replicas.prepare_files(job, replica, self.replica_dir(replica), self.job_dir(job) / "package")
            env = replicas.environment(job, replica, topo, bin_dir, home, work, cfg)
            started = replicas.start(job, replica, state, work, tmp, env, home, bin_dir, cfg)
            if isinstance(started, list):
                requests.append(started)
                starting.append((replica, None))
            else:
                starting.append((replica, started))
        if requests:
            with ThreadPoolExecutor(len(requests)) as pool:
                for _ in pool.map(lambda asks: [ask(op, **args) for op, args in asks], requests):
                    pass  # a refusal is raised here
        deadline = time.monotonic() + 10
        for replica, proc in starting:
            if proc and proc.wait():
                raise LaunchError("StartFailed", f"{replica.name}: the process keeper failed ({proc.returncode})")
            while not (self.state_dir(replica) / "keeper.pid").exists():
                if time.monotonic() > deadline:
                    raise LaunchError("StartFailed", f"{replica.name}: the process keeper did not start")
                time.sleep(0.01)

    def _home(self, job: Job) -> PfsPath:
        return resolve(job.user, f"/pfs/{job.datacenter.name}/home/{job.user.get_username()}")

    def _assign_ports(self, job: Job) -> None:
        with transaction.atomic():
            for replica in job.replicas.select_for_update().filter(port=None):
                replica.host, replica.port = keepers.HOST, _free_port()
                replica.save(update_fields=["host", "port"])

    # --- stop, delete ----------------------------------------------------------------------
    def stop(self, job: Job, replicas: Iterable[Replica] | None = None) -> None:
        for replica in job.replicas.all() if replicas is None else replicas:
            keepers.stop(self.state_dir(replica))

    def restart(self, job: Job, replicas: Iterable[Replica]) -> None:
        # Each attempt has its own state directory (state_dir), so launch() starts exactly the
        # replicas whose new attempt has not started yet.
        self.launch(job, only=replicas)

    def suspend(self, job: Job) -> None:
        # The working copies and the runtime stay; resume is a launch() of new attempts.
        self.stop(job)

    def delete(self, job: Job) -> None:
        self.stop(job)
        deadline = time.monotonic() + settings.KILL_GRACE_SECONDS + 5
        all_replicas = list(job.replicas.all())
        while any(keepers.live(self.state_dir(r)) for r in all_replicas):
            if time.monotonic() > deadline:
                raise LaunchError("DeleteTimeout", "replicas did not stop in time")
            time.sleep(0.1)
        self._release(job, all_replicas)
        self._reclaim(job, all_replicas)
        fdtree.rmtree(self.job_dir(job))  # not shutil.rmtree: it recurses per level, and a job nests deeper

    def _sandboxed(self) -> bool:
        try:
            return self.settings().sandboxed
        except LaunchError:
            return True  # a config broken since: what there is to drop was made sandboxed

    def _release(self, job: Job, all_replicas: Iterable[Replica]) -> None:
        """Drop what the job's replicas held on the host (its network namespace and route out, any
        cgroup a keeper that died left behind), and share its home again, so that what the job
        wrote there in any way is its user's to read through the service (idempotent). Sharing
        the home is the job's own user's concern (that user's next launch shares it again), so its
        failure is logged, not raised: the job must still be seen to end."""
        if not self._sandboxed():
            return
        try:
            ask("release_job", job=job.pk, replicas=[r.name for r in all_replicas])
        except (LauncherError, sandbox.Unavailable) as e:
            raise LaunchError("ReleaseFailed", str(e)) from e
        try:
            home = self._home(job)
            if home.disk.is_dir():
                ask("share", root="pfs", path=str(home.disk), uid=sandbox.job_uid(job.user))
        except (LauncherError, sandbox.Unavailable) as e:
            log.warning("job %s: its home was not shared back: %s", job.pk, e)

    def _reclaim(self, job: Job, all_replicas: Iterable[Replica]) -> None:
        """The working copies back within the service's reach (a job may have hidden what it wrote)."""
        if not self._sandboxed():
            return
        for replica in all_replicas:
            for name in ("work", "tmp"):
                path = self.replica_dir(replica) / name
                if path.is_dir():
                    ask("share", root="jobs", path=str(path), uid=sandbox.job_uid(job.user))

    # --- observe ---------------------------------------------------------------------------
    def observe(self, job: Job) -> dict[tuple[str, int], ReplicaStatus]:
        all_replicas = list(job.replicas.all())
        try:
            disk_limit = self.settings().disk_limit
        except LaunchError:
            disk_limit = config.DEFAULT_DISK_LIMIT
        statuses = {(r.role, r.index): keepers.status(self.state_dir(r), disk_limit) for r in all_replicas}
        if all(s.state in DONE for s in statuses.values()):
            self._release(job, all_replicas)
        return statuses

    def usage(self, job: Job) -> dict[tuple[str, int], Usage]:
        measured = {}
        for replica in job.replicas.filter(state=ReplicaState.RUNNING):
            pid = keepers.live(self.state_dir(replica))
            found = usage.measure(pid) if pid else None
            if found:
                measured[(replica.role, replica.index)] = found
        return measured
