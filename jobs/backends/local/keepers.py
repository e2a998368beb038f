"""A replica's keeper (launcher/keeper.py) as the service sees it: alive or not, what its state
files say, and how to stop it (directly when it runs as the service's uid, else through the
launcher, which alone may signal a keeper it started as root)."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

import launcher

from ...models import ReplicaState
from ..base import ReplicaStatus
from .launcher_client import ask

KEEPER = Path(launcher.__file__).resolve().parent / "keeper.py"
HOST = "127.0.0.1"


class _Seen(TypedDict):
    """What every status of a replica whose keeper started says."""

    pod: str
    host: str
    started: datetime


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def live(state: Path) -> int | None:
    """The keeper's pid if it is still running (checked against pid reuse)."""
    text = read(state / "keeper.pid")
    if not text:
        return None
    pid = int(text)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return None
    return pid if str(KEEPER).encode() in cmdline and str(state).encode() in cmdline else None


def stop(state: Path) -> None:
    """SIGTERM to the keeper (it stops its replica within the grace period)."""
    if state.exists():
        (state / "stop").touch()  # a launch still in flight will not start it
    pid = live(state)
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:  # a root keeper, started by the launcher
        ask("stop_replica", state=str(state))


def status(state: Path, disk_limit: int) -> ReplicaStatus:
    """The replica's status from its keeper's files (and whether the keeper still runs)."""
    pid_file = state / "keeper.pid"
    if not pid_file.exists():
        return ReplicaStatus(ReplicaState.PENDING)
    started = datetime.fromtimestamp(pid_file.stat().st_mtime, UTC)
    child = (read(state / "child.pid") or "").strip()
    base: _Seen = {"pod": child, "host": HOST, "started": started}
    done = read(state / "exit.json")
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
        if result.get("disk_limit"):
            return ReplicaStatus(ReplicaState.FAILED, code, "DiskLimit",
                                 f"stopped for writing more than {disk_limit >> 20} MiB to its working copy and /tmp "
                                 "(the datacenter's disk_limit); what it wrote there was removed",
                                 finished=finished, **base)
        if code == 0:
            return ReplicaStatus(ReplicaState.SUCCEEDED, 0, "Completed", "", finished=finished, **base)
        sig = result["signal"]
        how = f"killed by signal {signal.Signals(sig).name}" if sig else f"exited with code {code}"
        return ReplicaStatus(ReplicaState.FAILED, code, "Error", how, finished=finished, **base)
    if live(state):
        return ReplicaStatus(ReplicaState.RUNNING, **base)
    if read(state / "exit.json") is not None:  # finished between the two checks
        return status(state, disk_limit)
    return ReplicaStatus(ReplicaState.FAILED, None, "Lost",
                         "the process keeper died without recording an exit code", **base)
