"""Local backend: every replica is a process group on this machine, kept by jobs/shim.py.

Layout under JOBS_ROOT/<job id>/: `package/` (the job's snapshot of its PFS package) and, per
replica, `<role>-<index>/` holding `state/` (the keeper's pid and exit files) and `work/` (the
replica's working directory: its own copy of the package plus trainer_id/trainer_count).
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

from django.conf import settings
from django.db import transaction

from pfs.paths import resolve

from .. import contract, logstore, runtime
from ..models import Job, Replica, ReplicaState
from .base import Backend, LaunchError, ReplicaStatus, copy_tree_atomic, snapshot_package

SHIM = Path(__file__).resolve().parent.parent / "shim.py"
HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


class LocalBackend(Backend):
    def job_dir(self, job) -> Path:
        return settings.JOBS_ROOT / str(job.pk)

    def replica_dir(self, replica) -> Path:
        return settings.JOBS_ROOT / str(replica.job_id) / replica.name

    # --- prepare ---------------------------------------------------------------------------
    def prepare(self, job, heartbeat: Callable[[], None]) -> None:
        snapshot_package(job, self.job_dir(job) / "package")
        try:
            runtime.ensure_env(self._requirements(job), heartbeat)
        except runtime.RuntimeEnvError as e:
            raise LaunchError("RuntimeEnvFailed", f"{e.message}:\n{e.log_tail}") from e

    def _requirements(self, job) -> str:
        return _read(self.job_dir(job) / "package" / "requirements.txt") or ""

    # --- launch ----------------------------------------------------------------------------
    def launch(self, job) -> None:
        self._assign_ports(job)
        replicas = list(job.replicas.all())
        topo = contract.Topology(
            pservers=[r.endpoint for r in replicas if r.role == Replica.Role.PSERVER],
            trainers=[r.endpoint for r in replicas if r.role == Replica.Role.TRAINER],
        )
        bin_dir = runtime.ensure_env(self._requirements(job))
        for replica in replicas:
            if not Job.objects.filter(pk=job.pk, state=job.state).exists():
                return  # killed or failed while we were starting replicas
            self._start(job, replica, topo, bin_dir)

    def _assign_ports(self, job) -> None:
        with transaction.atomic():
            for replica in job.replicas.select_for_update().filter(port=None):
                replica.host, replica.port = HOST, _free_port()
                replica.save(update_fields=["host", "port"])

    def _start(self, job, replica, topo: contract.Topology, bin_dir: Path) -> None:
        rdir = self.replica_dir(replica)
        state = rdir / "state"
        if (state / "shim.pid").exists() or (state / "stop").exists():
            return
        state.mkdir(parents=True, exist_ok=True)
        work = rdir / "work"
        copy_tree_atomic(self.job_dir(job) / "package", work)
        if replica.role == Replica.Role.TRAINER:
            for name, text in contract.trainer_files(replica.index, job.trainers).items():
                (work / name).write_text(text)
        home = resolve(job.user, f"/pfs/{job.datacenter.name}/home/{job.user.get_username()}")
        home.disk.mkdir(parents=True, exist_ok=True)
        env = {
            # A clean environment: nothing of the server's (database URLs, secrets) leaks in.
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(rdir),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "VIRTUAL_ENV": str(bin_dir.parent),
            **job.env,
            **contract.replica_env(job, replica.role, replica.index, topo,
                                   pfs_home=str(home.disk), package=job.package),
        }
        argv = shlex.split(job.entry)
        if "/" not in argv[0]:
            argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
        log = logstore.path(replica)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        subprocess.run(
            [sys.executable, str(SHIM), "--state-dir", str(state), "--log", str(log),
             "--grace", str(settings.KILL_GRACE_SECONDS), "--cwd", str(work), "--", *argv],
            env=env, check=True, stdin=subprocess.DEVNULL,
        )
        # The keeper writes its pid right after detaching; wait so observe() never sees a gap.
        deadline = time.monotonic() + 10
        while not (state / "shim.pid").exists():
            if time.monotonic() > deadline:
                raise LaunchError("StartFailed", f"{replica.name}: the process keeper did not start")
            time.sleep(0.01)

    # --- stop, delete ----------------------------------------------------------------------
    def stop(self, job, replicas: Iterable | None = None) -> None:
        for replica in job.replicas.all() if replicas is None else replicas:
            state = self.replica_dir(replica) / "state"
            if state.exists():
                (state / "stop").touch()  # a launch still in flight will not start it
            pid = self._live_shim(state)
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def delete(self, job) -> None:
        self.stop(job)
        deadline = time.monotonic() + settings.KILL_GRACE_SECONDS + 5
        replicas = list(job.replicas.all())
        while any(self._live_shim(self.replica_dir(r) / "state") for r in replicas):
            if time.monotonic() > deadline:
                raise LaunchError("DeleteTimeout", "replicas did not stop in time")
            time.sleep(0.1)
        shutil.rmtree(self.job_dir(job), ignore_errors=True)

    # --- observe ---------------------------------------------------------------------------
    def _live_shim(self, state: Path) -> int | None:
        """The keeper's pid if it is still running (checked against pid reuse)."""
        text = _read(state / "shim.pid")
        if not text:
            return None
        pid = int(text)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            return None
        return pid if str(SHIM).encode() in cmdline and str(state).encode() in cmdline else None

    def observe(self, job) -> dict[tuple[str, int], ReplicaStatus]:
        return {(r.role, r.index): self._observe_one(r) for r in job.replicas.all()}

    def _observe_one(self, replica) -> ReplicaStatus:
        state = self.replica_dir(replica) / "state"
        pid_file = state / "shim.pid"
        if not pid_file.exists():
            return ReplicaStatus(ReplicaState.PENDING)
        started = datetime.fromtimestamp(pid_file.stat().st_mtime, UTC)
        child = (_read(state / "child.pid") or "").strip()
        base = {"pod": child, "host": HOST, "started": started}
        done = _read(state / "exit.json")
        if done is not None:
            result = json.loads(done)
            finished = datetime.fromtimestamp(result["finished"], UTC)
            code = result["exit_code"]
            if result["terminated"]:
                return ReplicaStatus(ReplicaState.TERMINATED, code, "Terminated", "stopped by PaddleCloud",
                                     finished=finished, **base)
            if code == 0:
                return ReplicaStatus(ReplicaState.SUCCEEDED, 0, "Completed", "", finished=finished, **base)
            sig = result["signal"]
            how = f"killed by signal {signal.Signals(sig).name}" if sig else f"exited with code {code}"
            return ReplicaStatus(ReplicaState.FAILED, code, "Error", how, finished=finished, **base)
        if self._live_shim(state):
            return ReplicaStatus(ReplicaState.RUNNING, **base)
        if _read(state / "exit.json") is not None:  # finished between the two checks
            return self._observe_one(replica)
        return ReplicaStatus(ReplicaState.FAILED, None, "Lost",
                             "the process keeper died without recording an exit code", **base)
