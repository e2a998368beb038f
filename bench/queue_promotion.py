"""Time from a job ending to the next queued job's replicas running, against submit-to-running of a
job that finds the queue empty (measured in the same run).

The datacenter has room for one job at a time. Each round runs job A, whose program prints the
moment it exits; job B is submitted while A runs and waits in the queue. "Running" is the moment
B's first line reaches its log, as in launch_overhead.py. Promotion = that moment minus A's exit:
the watcher seeing A end, the admission pass the end triggers, and B's launch. Goal: < 1 s.
"""

import time

from common import median, service, wait

HOLD = "import time; print('ready', flush=True); time.sleep(1.5); print('end', time.time(), flush=True)\n"
QUICK = "import time; print('ready', flush=True); time.sleep(30)\n"
ROUNDS = 5


def package(user, name: str, program: str) -> str:
    from pfs.paths import home

    pkg = home(user, "local").child("jobs", name)
    pkg.disk.mkdir(parents=True, exist_ok=True)
    (pkg.disk / "train.py").write_text(program)
    return pkg.virtual


def submit(user, name: str, program: str):
    from jobs import services

    return services.submit_job(user, {"name": name, "package": package(user, name, program), "mode": "collective",
                                      "entry": "python train.py", "trainers": 1, "cpu": "1", "memory": "64Mi"})


def log_of(job) -> str:
    from jobs.live import logstore

    return logstore.read(job.replicas.get()).text


def ready_at(job) -> float:
    wait(lambda: log_of(job).startswith("ready"))
    return time.time()


def empty_queue(user, n: int) -> float:
    """Submit to running with nothing ahead."""
    from jobs import services

    start = time.time()
    job = submit(user, f"alone-{n}", QUICK)
    running = ready_at(job) - start
    services.delete_job(job)
    return running


def promotion(user, n: int) -> float:
    from jobs import services

    first = submit(user, f"first-{n}", HOLD)
    ready_at(first)
    second = submit(user, f"second-{n}", QUICK)  # the datacenter is full: it waits
    running = ready_at(second)
    wait(lambda: "end " in log_of(first))
    ended = float(log_of(first).split("end ", 1)[1].split()[0])
    for job in (first, second):
        services.delete_job(job)
    return running - ended


def main() -> None:
    with service() as user:
        from accounts.models import Datacenter
        from jobs.models import Job

        Datacenter.objects.filter(name="local").update(capacity_cpu_millicores=1000)  # one job at a time
        empty_queue(user, 0)  # warm up: builds the (empty) runtime environment once
        base = median([empty_queue(user, n) for n in range(1, ROUNDS + 1)])
        wait(lambda: not Job.objects.filter(state__in=["Building", "Starting", "Running"]).exists())
        promoted = median([promotion(user, n) for n in range(ROUNDS)])
    print(f"submit -> replicas running, empty queue:       {base * 1000:7.1f} ms (median of {ROUNDS})")
    print(f"job ends -> next queued job's replicas running: {promoted * 1000:7.1f} ms (median of {ROUNDS})")
    print(f"ratio promotion/empty-queue start: {promoted / base:.2f}x; the queue adds "
          f"{(promoted - base) * 1000:.0f} ms (goal: promotion < 1000 ms: {'met' if promoted < 1 else 'NOT met'})")


if __name__ == "__main__":
    main()
