"""Overhead from submit to all replicas running, against spawning the same processes directly.

Each round submits a job of 2 pservers + 2 trainers whose program prints a line as soon as it
starts; "running" is the moment every replica's line has reached its log (what a user watching
the logs sees). The baseline starts the same four programs with subprocess.Popen and waits for
the same lines. Goal: overhead < 0.5 s, with every replica sandboxed (the default isolation);
the same rounds with isolation "none" show what the sandbox itself costs.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import median, service, wait

PROGRAM = "import time; print('ready', flush=True); time.sleep(30)\n"
ROUNDS = 5


def direct() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        logs = [Path(tmp) / f"{i}.log" for i in range(4)]
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=open(log, "w")) for log in logs]
        wait(lambda: all(log.read_text().startswith("ready") for log in logs))
        elapsed = time.perf_counter() - start
        for p in procs:
            p.kill()
            p.wait()
    return elapsed


def through_service(user, n: int) -> tuple[float, float]:
    from jobs import services
    from jobs.live import logstore
    from jobs.models import Job
    from pfs.paths import home

    pkg = home(user, "local").child("jobs", "bench")
    pkg.disk.mkdir(parents=True, exist_ok=True)
    (pkg.disk / "train.py").write_text(PROGRAM)
    start = time.perf_counter()
    job = services.submit_job(user, {"name": f"bench-{n}", "package": pkg.virtual, "entry": "python train.py",
                                     "pservers": 2, "trainers": 2, "cpu": "1", "pscpu": "1",
                                     "memory": "64Mi", "psmemory": "64Mi"})
    replicas = list(job.replicas.all())
    wait(lambda: all(logstore.read(r).text.startswith("ready") for r in replicas))
    running = time.perf_counter() - start
    wait(lambda: Job.objects.get(pk=job.pk).state == "Running")
    state = time.perf_counter() - start
    services.delete_job(job)
    return running, state


def set_isolation(isolation: str) -> None:
    from accounts.models import Datacenter

    Datacenter.objects.filter(backend="local").update(config={"isolation": isolation})


def main() -> None:
    with service() as user:
        through_service(user, 0)  # warm up: builds the (empty) runtime environment once
        direct()
        base = median([direct() for _ in range(ROUNDS)])
        set_isolation("none")
        bare = median([through_service(user, 100 + n)[0] for n in range(ROUNDS)])
        set_isolation("sandbox")
        results = [through_service(user, n) for n in range(1, ROUNDS + 1)]
        svc = median([r[0] for r in results])
        state = median([r[1] for r in results])
    overhead = svc - base
    print(f"direct spawn of 4 processes:          {base * 1000:7.1f} ms (median of {ROUNDS})")
    print(f"submit -> all 4 replicas running:     {svc * 1000:7.1f} ms (sandboxed)")
    print(f"  the same with isolation \"none\":     {bare * 1000:7.1f} ms "
          f"(the sandbox costs {(svc - bare) * 1000:.0f} ms)")
    print(f"submit -> job state Running recorded: {state * 1000:7.1f} ms")
    print(f"ratio service/direct: {svc / base:.2f}x; overhead {overhead * 1000:.0f} ms "
          f"(goal < 500 ms: {'met' if overhead < 0.5 else 'NOT met'})")


if __name__ == "__main__":
    main()
