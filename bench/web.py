"""Web tier throughput: requests/s of the job detail and the job list (`GET /api/v2/jobs/<name>/`,
`GET /api/v2/jobs/`, with a token) at 32 keep-alive connections, against a bare Django view
(bench/bare_django.py: no middleware, no database) served the same way: the Procfile's web
command line, its server, flags and process count, in the same run. A floor is measured beside
them, served the same way: the least an authenticated detail can do here (bench/floor_django.py:
the service's own ASGI application and middleware routing a plain view that reads the token and
the job's row, two queries, no DRF), so the figures say how much of the gap to the bare view is
the detail's own work and how much the stack every request goes through. Rounds of SECONDS each
interleave the four, so a busy machine slows them alike; the medians over ROUNDS are compared.
Goal: detail and list at least 0.5x the bare view's requests/s.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/pc_bench .venv/bin/python bench/web.py

The job has 2 pservers and 2 trainers and a dozen events, as a finished job does; the user has
60 jobs, so the list's page is full (50). The load generator (bench/load.py) runs in a process of
its own on the same machine, as it must here; it costs far less per request than the server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import Row, emit
from service import ROOT, Service, free_port, load, tree_cpu

BENCH = Path(__file__).resolve().parent
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
CONNECTIONS = 32
GOAL = 0.5

SEED = """
from django.contrib.auth import get_user_model
from accounts.models import Datacenter
from jobs.models import Job, JobEvent, Replica
u = get_user_model().objects.get(username="admin"); dc = Datacenter.objects.get(name="local")
for i in range(60):
    job = Job.objects.create(user=u, datacenter=dc, name=f"job-{i}", mode="ps", pservers=2, trainers=2,
                             package="/pfs/local/home/admin/pkg", entry="python train.py", state="Succeeded")
    for role in ("pserver", "trainer"):
        for k in range(2):
            r = Replica.objects.create(job=job, role=role, index=k, state="Succeeded", host="127.0.0.1",
                                       port=8000 + k, pod=str(1000 + k), exit_code=0)
            JobEvent.objects.create(job=job, replica=r, state="Running", reason="Started", message="running")
    for state in ("Queued", "Building", "Starting", "Running", "Succeeded"):
        JobEvent.objects.create(job=job, state=state, reason=state, message=f"the job is {state}")
"""


def web_command(port: int, app: str) -> str:
    """The Procfile's web line, serving `app` on `port`."""
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("web:"))
    command = line.split(":", 1)[1].strip().replace("paddleweb.asgi:application", app)
    return re.sub(r"\$\{PADDLECLOUD_PORT:-\d+\}", str(port), command)


def hammer(port: int, path: str, token: str | None) -> dict:
    headers = ["--header", f"Authorization: Token {token}"] if token else []
    out = subprocess.run([sys.executable, str(BENCH / "load.py"), str(port), path, "--connections",
                          str(CONNECTIONS), "--seconds", str(SECONDS), *headers],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    result: dict = json.loads(out)
    if result["errors"]:
        raise SystemExit(f"{path}: {result['errors']} answers were not 200 ({result['statuses']})")
    return result


def serve(app: str, probe: str, env: dict[str, str], token: str) -> tuple[subprocess.Popen[bytes], int]:
    """`app` (a module of bench/) served by the Procfile's web command on a port of its own, once it
    answers `probe`."""
    port = free_port()
    server = subprocess.Popen(["/bin/sh", "-c", "exec " + web_command(port, f"{app}:application")],
                              cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while subprocess.run(["curl", "-sf", "-H", f"Authorization: Token {token}", f"http://127.0.0.1:{port}{probe}"],
                         capture_output=True).returncode:
        if time.monotonic() > deadline or server.poll() is not None:
            os.killpg(server.pid, signal.SIGTERM)
            raise SystemExit(f"{app} did not start")
        time.sleep(0.2)
    return server, port


def main() -> None:
    with Service(name="web") as svc:
        svc.django(SEED)
        env = {**svc.env, "PYTHONPATH": os.pathsep.join((str(BENCH), str(ROOT))),
               "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"}
        servers: dict[str, subprocess.Popen[bytes]] = {}
        ports: dict[str, int] = {}
        try:
            for app, probe in (("bare_django", "/bare/"), ("floor_django", "/floor/jobs/job-59/")):
                servers[app], ports[app] = serve(app, probe, env, svc.token)
            bare_port, floor_port = ports["bare_django"], ports["floor_django"]
            targets = {"bare Django view": (bare_port, "/bare/", None),
                       "floor": (floor_port, "/floor/jobs/job-59/", svc.token),
                       "job detail": (svc.port, "/api/v2/jobs/job-59/", svc.token),
                       "job list": (svc.port, "/api/v2/jobs/", svc.token)}
            web_pid = next(p.pid for p in svc.processes() if p.name() != "sh" and "uvicorn" in " ".join(p.cmdline()))
            pids = {"bare Django view": servers["bare_django"].pid, "floor": servers["floor_django"].pid,
                    "job detail": web_pid, "job list": web_pid}
            for p, path, token in targets.values():  # warm every process and connection
                hammer(p, path, token)
            results: dict[str, list[dict]] = {name: [] for name in targets}
            for _ in range(ROUNDS):
                for name, (p, path, token) in targets.items():
                    cpu = tree_cpu(pids[name])
                    results[name].append(hammer(p, path, token))
                    results[name][-1]["cpu_ms"] = (tree_cpu(pids[name]) - cpu) / results[name][-1]["requests"] * 1e3
                    last = results[name][-1]
                    print(f"{name:18s} {last['rps']:8.1f} req/s  p50 {last['p50'] * 1000:6.1f} ms  p99 "
                          f"{last['p99'] * 1000:6.1f} ms  web CPU {last['cpu_ms']:.1f} ms/request  "
                          f"(load average {load()})", flush=True)
        finally:
            for server in servers.values():
                os.killpg(server.pid, signal.SIGTERM)
                server.wait(30)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    base, floor = med("bare Django view", "rps"), med("floor", "rps")
    bare_cpu = med("bare Django view", "cpu_ms")
    rows = []
    for name in ("job detail", "job list"):
        rps = med(name, "rps")
        rows.append(Row(f"{name} req/s, {CONNECTIONS} connections (p50 {med(name, 'p50') * 1000:.0f} ms, "
                        f"p99 {med(name, 'p99') * 1000:.0f} ms; web CPU {med(name, 'cpu_ms'):.1f} ms/request, "
                        f"bare {bare_cpu:.1f}; {rps / floor:.2f}x the floor)", f"{base:.0f}/s bare Django",
                        f"{rps:.0f}/s", f"{rps / base:.2f}x", f">= {GOAL}x", rps / base >= GOAL))
    # What any authenticated detail costs here at least: no goal of its own, so never "not met".
    rows.append(Row(f"floor (service stack, plain view: token + job row) req/s "
                    f"(p50 {med('floor', 'p50') * 1000:.0f} ms; web CPU {med('floor', 'cpu_ms'):.1f} ms/request)",
                    f"{base:.0f}/s bare Django",
                    f"{floor:.0f}/s", f"{floor / base:.2f}x", "- (reference)", True))
    emit(rows, f"web tier: {shlex.quote(web_command(0, 'APP'))}, median of {ROUNDS} rounds of {SECONDS:.0f} s")


if __name__ == "__main__":
    main()
