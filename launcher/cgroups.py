"""Per-replica cgroups: memory, CPU and pids limits for local replicas (cgroup v1 or v2).

Each replica gets a cgroup directly below the service's own one (from /proc/self/cgroup), so
an operator's limits on the service still bound every job. The replica's process joins it
before it executes anything (keeper.py); the keeper itself stays outside, so a replica at
its limit never takes down the process that records its exit. What the machine does not allow
is reported by `support()` (logged and shown on the datacenter's admin page), never skipped
silently.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

CONTROLLERS = ("memory", "cpu", "pids")
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Support:
    """Where each enforceable controller's parent cgroup is, and why the others are not."""

    version: int  # 1 or 2 (0: no cgroup filesystem)
    parents: dict[str, Path] = field(default_factory=dict)  # controller -> the service's own cgroup dir
    missing: dict[str, str] = field(default_factory=dict)  # controller -> why it cannot be enforced

    def summary(self) -> str:
        enforced = ", ".join(sorted(self.parents)) or "none"
        lines = [f"cgroup v{self.version}: enforced: {enforced}"]
        lines += [f"{name} NOT enforced: {why}" for name, why in sorted(self.missing.items())]
        return "; ".join(lines)


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    cpu_millis: int
    pids: int


@dataclass(frozen=True)
class Cgroup:
    dirs: list[Path]  # one per hierarchy (v1) or a single one (v2)
    oom_file: Path | None  # memory.oom_control (v1) or memory.events (v2): its `oom_kill` counter


def _mounts() -> tuple[dict[str, Path], Path | None]:
    """v1 controller -> mount point, and the cgroup2 mount point if any."""
    v1: dict[str, Path] = {}
    v2 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, _source, options = right.split()[:3]
            mount_point = Path(left.split()[4])
            if fstype == "cgroup2":
                v2 = mount_point
            elif fstype == "cgroup":
                for opt in options.split(","):
                    if opt in CONTROLLERS:
                        v1[opt] = mount_point
    return v1, v2


def _own_paths() -> dict[str, str]:
    """Controller (or "" for the unified hierarchy) -> this process's cgroup path."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _num, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _writable(parent: Path) -> str | None:
    probe = parent / f"paddlecloud-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"cannot create a cgroup in {parent}: {e.strerror}"
    return None


@functools.cache
def support() -> Support:
    """What this machine lets the service enforce (probed once per process)."""
    try:
        v1, v2 = _mounts()
        own = _own_paths()
    except OSError as e:
        return Support(0, missing={c: f"cannot read the cgroup setup: {e}" for c in CONTROLLERS})
    if any(c in v1 for c in CONTROLLERS):
        result = _support_v1(v1, own)
    elif v2 is not None:
        result = _support_v2(v2 / own.get("", "/").lstrip("/"))
    else:
        result = Support(0, missing={c: "no cgroup filesystem is mounted" for c in CONTROLLERS})
    if result.missing:
        log.warning("local jobs: %s", result.summary())
    return result


def _support_v1(v1: dict[str, Path], own: dict[str, str]) -> Support:
    """Each controller's own cgroup in its v1 hierarchy, where the service may make children."""
    parents: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for name in CONTROLLERS:
        if name not in v1:
            missing[name] = "no cgroup v1 hierarchy has this controller"
            continue
        parent = v1[name] / own.get(name, "/").lstrip("/")
        why = _writable(parent)
        if why:
            missing[name] = why
        else:
            parents[name] = parent
    return Support(1, parents, missing)


def _support_v2(parent: Path) -> Support:
    """The controllers the service's own cgroup2 `parent` passes down to children it may make."""
    parents: dict[str, Path] = {}
    missing: dict[str, str] = {}
    try:
        available = set((parent / "cgroup.controllers").read_text().split())
        wanted = [c for c in CONTROLLERS if c in available]
        if wanted:
            # A non-root cgroup can pass controllers down only while it holds no processes itself.
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
    except OSError as e:
        enabled = set()
        reason = (f"cannot enable controllers below {parent}: {e.strerror} (run the service in a cgroup "
                  "delegated to it, e.g. systemd's Delegate=yes, with no processes of its own)")
    else:
        reason = f"not available in {parent}"
    why = _writable(parent) if enabled else None
    for name in CONTROLLERS:
        if name in enabled and not why:
            parents[name] = parent
        else:
            missing[name] = why or reason
    return Support(2, parents, missing)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def create(name: str, limits: Limits) -> Cgroup | None:
    """The replica's cgroup with its limits set (idempotent); None where nothing is enforceable."""
    sup = support()
    if not sup.parents:
        return None
    dirs: dict[str, Path] = {}
    for controller, parent in sup.parents.items():
        path = parent / name
        path.mkdir(exist_ok=True)
        dirs[controller] = path
    oom_file = None
    if sup.version == 1:
        if "memory" in dirs:
            mem = dirs["memory"]
            _write(mem / "memory.limit_in_bytes", str(limits.memory_bytes))
            if (mem / "memory.memsw.limit_in_bytes").exists():  # no swapping past the limit either
                _write(mem / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            oom_file = mem / "memory.oom_control"
        if "cpu" in dirs:
            _write(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(max(1000, limits.cpu_millis * CPU_PERIOD_US // 1000)))
        if "pids" in dirs:
            _write(dirs["pids"] / "pids.max", str(limits.pids))
    else:
        path = next(iter(dirs.values()))
        if "memory" in dirs:
            _write(path / "memory.max", str(limits.memory_bytes))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")
            oom_file = path / "memory.events"
        if "cpu" in dirs:
            _write(path / "cpu.max", f"{max(1000, limits.cpu_millis * CPU_PERIOD_US // 1000)} {CPU_PERIOD_US}")
        if "pids" in dirs:
            _write(path / "pids.max", str(limits.pids))
    return Cgroup(sorted(set(dirs.values())), oom_file)


def remove(name: str) -> None:
    """Remove a replica's cgroup left behind by a keeper that died (empty ones only)."""
    for parent in set(support().parents.values()):
        try:
            (parent / name).rmdir()
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("cgroup %s: %s", parent / name, e.strerror)
