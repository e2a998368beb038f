"""CPU and memory of local replicas, read with psutil over the processes below each replica's
keeper (keeper.py): the replica's command and everything it started, the keeper excluded."""

from __future__ import annotations

import psutil

from ...live.usage import Usage


def measure(keeper_pid: int) -> Usage | None:
    """The summed use of the keeper's descendants; None when the keeper is gone.

    CPU is cumulative (user + system, with the children they have reaped), so the rate between
    two samples does not depend on this process having watched the one before."""
    try:
        procs = psutil.Process(keeper_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    cpu = 0.0
    memory = 0
    for proc in procs:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                rss = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue  # ended (or hidden) between the listing and the reading
        cpu += times.user + times.system + times.children_user + times.children_system
        memory += rss
    return Usage(memory_bytes=memory, cpu_seconds=round(cpu, 3))
