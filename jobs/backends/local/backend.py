"""Local backend: every replica is a process group on this machine, kept by keeper.py.

With the datacenter's default isolation ("sandbox", see config.py) each replica runs in a
bubblewrap sandbox (sandbox.py) as its user's job uid, inside its job's network namespace
(netns.py), held to its memory, CPU and pids limits by a cgroup of its own (cgroups.py).
A machine where the sandbox does not work fails the job with reason SandboxUnavailable.

Layout under JOBS_ROOT/<job id>/: `package/` (the job's snapshot of its PFS package) and, per
replica, `<role>-<index>/` holding `state/` (the keeper's pid and exit files, the sandbox's
options), `etc/` (the sandbox's account files) and `work/` (the replica's working directory: its
own copy of the package plus trainer_id/trainer_count).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import psutil
from django.conf import settings
from django.db import transaction

from pfs.paths import PfsPath, resolve
from quotas.services import Capacity
from quotas.units import quantity

from ...live import logstore
from ...live.usage import Usage
from ...models import Job, Replica, ReplicaState
from .. import contract
from ..base import Backend, LaunchError, ReplicaStatus, copy_tree_atomic, ensure_checkpoint_dir, snapshot_package
from . import cgroups, config, egress, netns, runtime, sandbox, usage
from .watcher import LocalWatcher

KEEPER = Path(__file__).resolve().parent / "keeper.py"
HOST = "127.0.0.1"
# The keeper's own environment when the job's goes to the sandbox instead: enough to find nsenter.
KEEPER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DONE = (ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.TERMINATED)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _cgroup_name(job: Job, replica: Replica) -> str:
    return f"{netns.name(job)}-{replica.name}"


def _limits(job: Job, replica: Replica, pids: int) -> cgroups.Limits:
    ps = replica.role == Replica.Role.PSERVER
    cpu, memory = (job.pscpu, job.psmemory) if ps else (job.cpu, job.memory)
    return cgroups.Limits(memory_bytes=int(quantity(memory)), cpu_millis=int(quantity(cpu) * 1000), pids=pids)


class _Seen(TypedDict):
    """What every status of a replica whose keeper started says."""

    pod: str
    host: str
    started: datetime


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
        if not cfg.sandboxed:
            lines = ["Sandbox OFF (isolation: none): jobs run as the service's user and can read and change "
                     "everything it can, every user's data included. For a single-user machine only."]
        elif why := sandbox.probe():
            lines = [f"Sandbox UNAVAILABLE: jobs fail with SandboxUnavailable. {why}"]
        else:
            way_out = ("internet access through slirp4netns (never the host's loopback)" if cfg.internet
                       else "no network access beyond the job's own replicas")
            lines = [f"Sandbox enforced (bubblewrap): every job runs as its user's own uid in a network namespace "
                     f"of its own, every replica in its own mount and PID namespace, with no capabilities; {way_out}."]
        support = cgroups.support()
        enforced = {"memory": "memory", "cpu": "CPU", "pids": f"pids (at most {cfg.pids_limit} per replica)"}
        lines += [f"Limit enforced: {enforced[c]}" for c in sorted(support.parents)]
        lines += [f"Limit NOT enforced: {c}: {reason}" for c, reason in sorted(support.missing.items())]
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
    def prepare(self, job: Job, heartbeat: Callable[[], None]) -> None:
        cfg = self.settings()
        self._check_sandbox(cfg)
        snapshot_package(job, self.job_dir(job) / "package")
        try:
            runtime.ensure_env(self._requirements(job), heartbeat, sandboxed=cfg.sandboxed)
        except runtime.RuntimeEnvError as e:
            raise LaunchError("RuntimeEnvFailed", f"{e.message}:\n{e.log_tail}") from e

    def _requirements(self, job: Job) -> str:
        return _read(self.job_dir(job) / "package" / "requirements.txt") or ""

    # --- launch ----------------------------------------------------------------------------
    def _check_sandbox(self, cfg: config.LocalSettings) -> None:
        if cfg.sandboxed and (why := sandbox.probe()):
            raise LaunchError("SandboxUnavailable", f"local jobs cannot be isolated on this machine: {why}")

    def launch(self, job: Job, only: Iterable[Replica] | None = None) -> None:
        cfg = self.settings()
        self._check_sandbox(cfg)
        self._assign_ports(job)
        replicas = list(job.replicas.all())
        wanted = None if only is None else {(r.role, r.index) for r in only}
        topo = contract.Topology(
            pservers=[r.endpoint for r in replicas if r.role == Replica.Role.PSERVER],
            trainers=[r.endpoint for r in replicas if r.role == Replica.Role.TRAINER],
        )
        bin_dir = runtime.ensure_env(self._requirements(job), sandboxed=cfg.sandboxed)
        home = resolve(job.user, f"/pfs/{job.datacenter.name}/home/{job.user.get_username()}")
        home.disk.mkdir(parents=True, exist_ok=True)
        ensure_checkpoint_dir(job)  # before give_to below, which hands it to the job's uid
        ns = None
        if cfg.sandboxed:
            ns = netns.ensure(netns.name(job))
            if cfg.internet:
                if not shutil.which("slirp4netns"):
                    raise LaunchError("SandboxUnavailable", "internet is on for this datacenter but slirp4netns "
                                      "is not installed: `sudo apt-get install slirp4netns`")
                egress.start(ns, self._egress_pid_file(job))
            sandbox.give_to(home.disk, sandbox.job_uid(job.user))  # what the service put there since
        # Keepers start side by side (each is an interpreter starting up); then every one must
        # have written its pid, so observe() never sees a gap.
        starting = []
        for replica in replicas if wanted is None else [r for r in replicas if (r.role, r.index) in wanted]:
            if not Job.objects.filter(pk=job.pk, state=job.state).exists():
                break  # killed or failed while we were starting replicas
            launcher = self._start(job, replica, topo, bin_dir, home, cfg, ns)
            if launcher:
                starting.append((replica, launcher))
        deadline = time.monotonic() + 10
        for replica, launcher in starting:
            if launcher.wait():
                raise LaunchError("StartFailed", f"{replica.name}: the process keeper failed ({launcher.returncode})")
            while not (self.state_dir(replica) / "keeper.pid").exists():
                if time.monotonic() > deadline:
                    raise LaunchError("StartFailed", f"{replica.name}: the process keeper did not start")
                time.sleep(0.01)

    def _assign_ports(self, job: Job) -> None:
        with transaction.atomic():
            for replica in job.replicas.select_for_update().filter(port=None):
                replica.host, replica.port = HOST, _free_port()
                replica.save(update_fields=["host", "port"])

    def _start(self, job: Job, replica: Replica, topo: contract.Topology, bin_dir: Path, home: PfsPath,
               cfg: config.LocalSettings, ns: Path | None) -> subprocess.Popen[bytes] | None:
        """Start the replica's keeper (unless it was started or stopped already); returns the
        launcher process, which exits as soon as the keeper has detached."""
        rdir = self.replica_dir(replica)
        state = self.state_dir(replica)
        if (state / "keeper.pid").exists() or (state / "stop").exists():
            return None
        state.mkdir(parents=True, exist_ok=True)
        work = rdir / "work"
        copy_tree_atomic(self.job_dir(job) / "package", work)
        if replica.role == Replica.Role.TRAINER:
            for name, text in contract.trainer_files(replica.index, job.trainers).items():
                # The package may hold a link by that name: replace it, never write through it.
                (work / name).unlink(missing_ok=True)
                fd = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
        env = {
            # A clean environment: nothing of the server's (database URLs, secrets) leaks in.
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(work if cfg.sandboxed else rdir),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "VIRTUAL_ENV": str(bin_dir.parent),
            **job.env,
            **contract.replica_env(job, replica.role, replica.index, topo, package=job.package,
                                   pfs_home=home.virtual if cfg.sandboxed else str(home.disk)),
        }
        argv = shlex.split(job.entry)
        if "/" not in argv[0]:
            argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
        log = logstore.path(replica)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        # -I -S: the keeper needs only the standard library, so it skips site-packages' start-up.
        keeper = [sys.executable, "-I", "-S", str(KEEPER), "--state-dir", str(state), "--log", str(log),
                  "--require", argv[0], "--grace", str(settings.KILL_GRACE_SECONDS), "--cwd", str(work)]
        cgroup = cgroups.create(_cgroup_name(job, replica), _limits(job, replica, cfg.pids_limit))
        if cgroup:
            keeper += [arg for d in cgroup.dirs for arg in ("--cgroup", str(d))]
            keeper += ["--oom-file", str(cgroup.oom_file)] if cgroup.oom_file else []
        if cfg.sandboxed:
            assert ns is not None  # launch() makes the namespace of every sandboxed job
            uid = sandbox.job_uid(job.user)
            # bwrap enters the working copy before it becomes the job uid, without the capability
            # to override permissions: a package whose top directory is 0700 must still be entered.
            os.chmod(work, 0o755)
            sandbox.give_to(work, uid)
            hostname = f"{job.k8s_name}-{replica.name}"[:63]
            sandbox.write_etc(rdir / "etc", uid, job.user.get_username(), home.virtual, hostname,
                              egress.RESOLV_CONF if cfg.internet else "")
            public = resolve(job.user, f"/pfs/{job.datacenter.name}/public")
            sandbox.write_options(state / "sandbox.args", sandbox.options(
                hostname=hostname, work=work, home=home.disk, home_at=home.virtual,
                public=public.disk, public_at=public.virtual, venv=bin_dir.parent, etc=rdir / "etc", env=env))
            keeper += ["--fd3", str(state / "sandbox.args"), "--sandboxed", "--", *sandbox.command(ns, uid, argv)]
            env = {"PATH": KEEPER_PATH, "LANG": "C.UTF-8"}
        else:
            keeper += ["--", *argv]
        return subprocess.Popen(keeper, env=env, stdin=subprocess.DEVNULL)

    # --- stop, delete ----------------------------------------------------------------------
    def stop(self, job: Job, replicas: Iterable[Replica] | None = None) -> None:
        for replica in job.replicas.all() if replicas is None else replicas:
            state = self.state_dir(replica)
            if state.exists():
                (state / "stop").touch()  # a launch still in flight will not start it
            pid = self._live_keeper(state)
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

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
        replicas = list(job.replicas.all())
        while any(self._live_keeper(self.state_dir(r)) for r in replicas):
            if time.monotonic() > deadline:
                raise LaunchError("DeleteTimeout", "replicas did not stop in time")
            time.sleep(0.1)
        self._release(job, replicas)
        shutil.rmtree(self.job_dir(job), ignore_errors=True)

    def _egress_pid_file(self, job: Job) -> Path:
        return self.job_dir(job) / "slirp4netns.pid"

    def _release(self, job: Job, replicas: Iterable[Replica]) -> None:
        """Drop what the job's replicas held on the host: its network namespace and route out,
        any cgroup a keeper that died left behind (idempotent)."""
        egress.stop(self._egress_pid_file(job))
        netns.remove(netns.name(job))
        for replica in replicas:
            cgroups.remove(_cgroup_name(job, replica))

    # --- observe ---------------------------------------------------------------------------
    def _live_keeper(self, state: Path) -> int | None:
        """The keeper's pid if it is still running (checked against pid reuse)."""
        text = _read(state / "keeper.pid")
        if not text:
            return None
        pid = int(text)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            return None
        return pid if str(KEEPER).encode() in cmdline and str(state).encode() in cmdline else None

    def observe(self, job: Job) -> dict[tuple[str, int], ReplicaStatus]:
        replicas = list(job.replicas.all())
        statuses = {(r.role, r.index): self._observe_one(r) for r in replicas}
        if all(s.state in DONE for s in statuses.values()):
            self._release(job, replicas)
        return statuses

    def usage(self, job: Job) -> dict[tuple[str, int], Usage]:
        measured = {}
        for replica in job.replicas.filter(state=ReplicaState.RUNNING):
            pid = self._live_keeper(self.state_dir(replica))
            found = usage.measure(pid) if pid else None
            if found:
                measured[(replica.role, replica.index)] = found
        return measured

    def _observe_one(self, replica: Replica) -> ReplicaStatus:
        state = self.state_dir(replica)
        pid_file = state / "keeper.pid"
        if not pid_file.exists():
            return ReplicaStatus(ReplicaState.PENDING)
        started = datetime.fromtimestamp(pid_file.stat().st_mtime, UTC)
        child = (_read(state / "child.pid") or "").strip()
        base: _Seen = {"pod": child, "host": HOST, "started": started}
        done = _read(state / "exit.json")
        if done is not None:
            result = json.loads(done)
            finished = datetime.fromtimestamp(result["finished"], UTC)
            code = result["exit_code"]
            if result["terminated"]:
                return ReplicaStatus(ReplicaState.TERMINATED, code, "Terminated", "stopped by PaddleCloud",
                                     finished=finished, **base)
            if result.get("oom_killed"):
                return ReplicaStatus(ReplicaState.FAILED, code, "OOMKilled", "killed for exceeding its memory limit",
                                     finished=finished, **base)
            if code == 0:
                return ReplicaStatus(ReplicaState.SUCCEEDED, 0, "Completed", "", finished=finished, **base)
            sig = result["signal"]
            how = f"killed by signal {signal.Signals(sig).name}" if sig else f"exited with code {code}"
            return ReplicaStatus(ReplicaState.FAILED, code, "Error", how, finished=finished, **base)
        if self._live_keeper(state):
            return ReplicaStatus(ReplicaState.RUNNING, **base)
        if _read(state / "exit.json") is not None:  # finished between the two checks
            return self._observe_one(replica)
        return ReplicaStatus(ReplicaState.FAILED, None, "Lost",
                             "the process keeper died without recording an exit code", **base)
