"""Starting one replica: its working copy and /tmp, its environment (the process contract), and its
keeper — through the launcher into the sandbox, or, with isolation "none", directly as the
service's own user."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from pfs.paths import PfsPath, resolve
from quotas.units import quantity

from ...live import logstore
from ...models import Job, Replica
from .. import contract
from ..base import copy_tree_atomic
from . import config, sandbox
from .keepers import KEEPER


def limits(job: Job, replica: Replica) -> tuple[int, int]:
    """The replica's memory (bytes) and CPU (millicores)."""
    ps = replica.role == Replica.Role.PSERVER
    cpu, memory = (job.pscpu, job.psmemory) if ps else (job.cpu, job.memory)
    return int(quantity(memory)), int(quantity(cpu) * 1000)


def prepare_files(job: Job, replica: Replica, rdir: Path, package: Path) -> tuple[Path, Path]:
    """The replica's own copy of the package (plus trainer_id/trainer_count) and its /tmp."""
    work, tmp = rdir / "work", rdir / "tmp"
    copy_tree_atomic(package, work)
    tmp.mkdir(exist_ok=True)
    if replica.role == Replica.Role.TRAINER:
        for name, text in contract.trainer_files(replica.index, job.trainers).items():
            # The package may hold a link by that name: replace it, never write through it.
            (work / name).unlink(missing_ok=True)
            fd = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(text)
    return work, tmp


def environment(job: Job, replica: Replica, topo: contract.Topology, bin_dir: Path, home: PfsPath, work: Path,
                cfg: config.LocalSettings) -> dict[str, str]:
    """A clean environment: the process contract and the user's own, nothing of the server's."""
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work if cfg.sandboxed else work.parent),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "VIRTUAL_ENV": str(bin_dir.parent),
        **job.env,
        **contract.replica_env(job, replica.role, replica.index, topo, package=job.package,
                               pfs_home=home.virtual if cfg.sandboxed else str(home.disk)),
    }


Requests = list[tuple[str, dict[str, Any]]]


def start(job: Job, replica: Replica, state: Path, work: Path, tmp: Path, env: dict[str, str], home: PfsPath,
          bin_dir: Path, cfg: config.LocalSettings) -> subprocess.Popen[bytes] | Requests:
    """Start the replica's keeper. Sandboxed, what to ask the launcher for, in order (it answers
    once the keeper has detached; the caller sends them, several replicas' side by side); else
    the keeper's starter, a process that exits as soon as the keeper has detached."""
    argv = shlex.split(job.entry)
    if "/" not in argv[0]:
        argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    log = logstore.path(replica)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    memory, cpu = limits(job, replica)
    if cfg.sandboxed:
        uid = sandbox.job_uid(job.user)
        public = resolve(job.user, f"/pfs/{job.datacenter.name}/public")
        return [*[("share", {"root": "jobs", "path": str(path), "uid": uid}) for path in (work, tmp)],
                ("start_replica", {
                    "job": job.pk, "replica": replica.name, "uid": uid, "internet": cfg.internet,
                    "memory_bytes": memory, "cpu_millis": cpu, "pids": cfg.pids_limit, "disk_bytes": cfg.disk_limit,
                    "home": str(home.disk), "home_at": home.virtual, "public": str(public.disk),
                    "public_at": public.virtual, "argv": argv, "env": env,
                    "hostname": f"{job.k8s_name}-{replica.name}"[:63].rstrip("-"),
                    "username": job.user.get_username(), "grace": int(settings.KILL_GRACE_SECONDS),
                    "state": str(state), "log": str(log), "work": str(work), "tmp": str(tmp),
                    "venv": str(bin_dir.parent)})]
    # isolation "none": the keeper runs as the service's own user, started from here.
    fds = [os.open(state, os.O_RDONLY | os.O_DIRECTORY), os.open(log, os.O_WRONLY | os.O_APPEND),
           os.open(work, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        # -I -S: the keeper needs only the standard library, so it skips site-packages' start-up.
        keeper = [sys.executable, "-I", "-S", str(KEEPER), "--label", str(state), "--state-fd", str(fds[0]),
                  "--log-fd", str(fds[1]), "--cwd-fd", str(fds[2]), "--require", argv[0],
                  "--grace", str(settings.KILL_GRACE_SECONDS), "--", *argv]
        return subprocess.Popen(keeper, env=env, stdin=subprocess.DEVNULL, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
