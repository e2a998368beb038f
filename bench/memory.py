"""Memory of the idle service: the RSS of every process of the tree `make run` starts, at its
defaults, once it has served a few requests and settled (web pages, the API, a websocket are
loaded; no job runs). Goal: under 600 MB in all (RSS counts pages processes share once per
process, so the sum is what `ps` users see, an upper bound of what the tree really takes; PSS,
which shares them out, is printed beside it).

    .venv/bin/python bench/memory.py
"""

from __future__ import annotations

import time

import psutil
from report import Row, emit
from service import Service

GOAL_MB = 600
SETTLE = 15.0  # seconds: beat's first schedule, the worker's first reconcile, heartbeats


def name(p: psutil.Process) -> str:
    cmd = p.cmdline()
    text = " ".join(cmd[1:] if cmd and cmd[0].endswith(("python", "python3", "python3.11")) else cmd)
    return text[:90]


def main() -> None:
    with Service(name="memory") as svc:
        assert svc.api is not None
        for path in ("/api/v2/jobs/", "/api/v2/health/", "/api/v2/quota/", "/api/v2/files/?path=/pfs/local/home/admin"):
            svc.api.get(path)
        time.sleep(SETTLE)
        rows = []
        for p in svc.processes():
            try:
                info = p.memory_full_info()
                rows.append((info.rss, info.pss, p.pid, name(p)))
            except psutil.NoSuchProcess:
                pass
    rss = sum(r[0] for r in rows)
    pss = sum(r[1] for r in rows)
    print(f"{'RSS MB':>8} {'PSS MB':>8} {'pid':>7}  process")
    for r in sorted(rows, reverse=True):
        print(f"{r[0] / 1e6:8.1f} {r[1] / 1e6:8.1f} {r[2]:7d}  {r[3]}")
    print(f"{rss / 1e6:8.1f} {pss / 1e6:8.1f}          in {len(rows)} processes")
    emit([Row(f"idle service tree RSS ({len(rows)} processes; PSS {pss / 1e6:.0f} MB)", "-",
              f"{rss / 1e6:.0f} MB", "-", f"< {GOAL_MB} MB", rss / 1e6 < GOAL_MB)], "memory")


if __name__ == "__main__":
    main()
