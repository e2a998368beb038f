"""The command line's start: `paddlectl ls <home>` and `paddlectl get jobs` as users run them (a
process each, configured by PADDLECTL_ENDPOINT/PADDLECTL_TOKEN as bench/transfer.py does) against
the running service, from the process's start to its exit, against a baseline process that
makes the same HTTP requests with nothing else: `python -c` with http.client, the JSON decoded.
The two take turns round by round, so a busy machine slows both alike. Goal: each command within
100 ms of its baseline (medians). The CPU each process used (user + system) is printed beside
the wall time: it moves less with the load.

    .venv/bin/python bench/cli_start.py        # BENCH_ROUNDS=10 by default

The user has 20 jobs (suspended: active, which `get jobs` lists, and left alone by the service)
and 20 files in their home beside the examples the service puts there: both commands print a
table of 20 rows or so.
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from report import Row, emit
from service import ROOT, Service, load

PY = sys.executable
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "10"))
GOAL = 0.100  # seconds over the baseline
HOME = "/pfs/local/home/admin"

SEED = """
from django.contrib.auth import get_user_model
from accounts.models import Datacenter
from jobs.models import Job
u = get_user_model().objects.get(username="admin"); dc = Datacenter.objects.get(name="local")
for i in range(20):
    Job.objects.create(user=u, datacenter=dc, name=f"job-{i}", mode="ps", pservers=2, trainers=2,
                       package="/pfs/local/home/admin/pkg", entry="python train.py", state="Suspended")
"""

# The baseline: the same GETs (every page, as paddlectl follows `next`) on one keep-alive
# connection, each answer decoded; nothing printed but a count.
BASELINE = """
import http.client, json, os, sys
from urllib.parse import urlsplit
endpoint = urlsplit(os.environ["PADDLECTL_ENDPOINT"])
conn = http.client.HTTPConnection(endpoint.hostname, endpoint.port)
headers = {"Authorization": "Token " + os.environ["PADDLECTL_TOKEN"], "Accept": "application/json"}
url, n = sys.argv[1], 0
while url:
    conn.request("GET", url, headers=headers)
    response = conn.getresponse()
    page = json.loads(response.read())
    if response.status != 200:
        sys.exit(f"{url}: {response.status} {page}")
    paged = isinstance(page, dict)
    n += len(page["results"] if paged else page)
    following = urlsplit(page["next"]) if paged and page.get("next") else None
    url = following and following.path + "?" + following.query
print(n)
"""

# name -> (paddlectl's arguments, the baseline's): the baseline asks for what paddlectl asks for.
COMMANDS = {
    "paddlectl ls <home>": (["-m", "paddlectl", "ls", HOME],
                            ["-c", BASELINE, f"/api/v2/files/?path={HOME}&limit=1000"]),
    "paddlectl get jobs": (["-m", "paddlectl", "get", "jobs"], ["-c", BASELINE, "/api/v2/jobs/?active=true"]),
}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds of `python ARGV` as a process of its own, and the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([PY, *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"{argv[:4]} failed ({done.returncode}): {done.stdout[-500:]}{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def p99(values: list[float]) -> float:
    """The 99th percentile (the slowest of fewer than 100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> None:
    with Service(name="cli-start") as svc, tempfile.TemporaryDirectory(prefix="cli-start-", dir=svc.var) as tmp:
        assert svc.api is not None
        svc.django(SEED)
        svc.api.get("/api/v2/files/", params={"path": HOME}).raise_for_status()  # makes the home
        for i in range(20):
            put = svc.api.put("/api/v2/files/content/", params={"path": f"{HOME}/file-{i}.txt"}, content=b"x" * i)
            put.raise_for_status()
        # As installed (pip compiles it): from bytecode, even where PYTHONDONTWRITEBYTECODE is set,
        # under which every run would compile the whole client again (about 30 ms here).
        compileall.compile_dir(str(ROOT / "client" / "paddlectl"), quiet=1)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "client"), "HOME": tmp, "PADDLECTL_ENDPOINT": svc.url,
               "PADDLECTL_TOKEN": svc.token, "PADDLECTL_USERNAME": "admin"}
        for argv in (a for pair in COMMANDS.values() for a in pair):
            timed(argv, env)  # warm up: bytecode, the page cache, the server's first requests
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for n in range(ROUNDS):
            for name, (command, baseline) in COMMANDS.items():
                sides = [("paddlectl", command), ("baseline", baseline)]
                for side, argv in sides if n % 2 == 0 else sides[::-1]:
                    runs.setdefault((name, side), []).append(timed(argv, env))
            print(f"round {n}: " + "  ".join(f"{name} {runs[(name, 'paddlectl')][-1][0] * 1000:.0f} ms "
                                           f"(baseline {runs[(name, 'baseline')][-1][0] * 1000:.0f})"
                                           for name in COMMANDS) + f"  (load average {load()})", flush=True)

    rows = []
    for name in COMMANDS:
        ours, base = runs[(name, "paddlectl")], runs[(name, "baseline")]
        wall, base_wall = statistics.median(w for w, _ in ours), statistics.median(w for w, _ in base)
        cpu, base_cpu = statistics.median(c for _, c in ours), statistics.median(c for _, c in base)
        rows.append(Row(f"{name}: start to exit, p50 (p99; CPU)",
                        f"{base_wall * 1000:.0f} ms ({p99([w for w, _ in base]) * 1000:.0f}; {base_cpu * 1000:.0f} "
                        "ms) python -c http.client",
                        f"{wall * 1000:.0f} ms ({p99([w for w, _ in ours]) * 1000:.0f}; {cpu * 1000:.0f} ms)",
                        f"+{(wall - base_wall) * 1000:.0f} ms", f"<= +{GOAL * 1000:.0f} ms", wall - base_wall <= GOAL))
    emit(rows, f"command line start, median of {ROUNDS} rounds")


if __name__ == "__main__":
    main()
