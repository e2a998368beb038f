"""Status sync cost on a Kubernetes datacenter: API requests per minute while N jobs run.

The service (worker + `watch_jobs` loop, as `make run` starts them) runs against the emulated
Kubernetes API of the tests (jobs/tests/k8s_emulator.py, real HTTP). N parameter-server jobs
(2 pservers + 2 trainers each) are launched and brought to Running by playing the cluster;
then every request the API server receives during a quiet window is counted. Status comes
from a few watches of the whole datacenter (re-opened every `watch_timeout`) and one log
stream per pod, so the rate must not grow with N; polling per job would grow linearly.
Goal: rate(100 jobs) / rate(10 jobs) <= 1.2. Prints both rates and the ratio.
"""

import os
import sys
import time
from collections import Counter

from common import service, wait

WATCH_TIMEOUT = 10  # seconds; short, so the window sees every watch re-opened several times
WINDOW = float(os.environ.get("BENCH_WINDOW", "60"))
SIZES = (10, 100)


def make_jobs(cluster, user, first: int, count: int) -> list:
    from jobs import services
    from tests.support import make_package

    package = make_package(user, "bench", {"train.py": "print('hi')\n"}, datacenter="k8s")
    jobs = []
    for n in range(first, first + count):
        jobs.append(services.submit_job(user, {
            "name": f"bench-{n}", "datacenter": "k8s", "package": package, "entry": "python train.py",
            "pservers": 2, "trainers": 2, "cpu": "100m", "pscpu": "100m", "memory": "64Mi", "psmemory": "64Mi"}))
    return jobs


def bring_up(cluster, jobs) -> None:
    """Play the controllers and kubelets until every job is Running."""
    from jobs.backends.registry import get_backend
    from jobs.models import Job

    for job in jobs:
        ns = get_backend(job.datacenter).namespace(job)
        wait(lambda name=f"{job.name}-pserver", ns=ns: ("statefulsets", name) in cluster.objects_in(ns), timeout=120)
        for pod in cluster.run_statefulset(ns, f"{job.name}-pserver"):
            cluster.pod_running(ns, pod)
            cluster.log(ns, pod, "pserver ready")
        cluster.statefulset_ready(ns, f"{job.name}-pserver", 2)
    for job in jobs:
        ns = get_backend(job.datacenter).namespace(job)
        wait(lambda name=f"{job.name}-trainer", ns=ns: ("jobs", name) in cluster.objects_in(ns), timeout=120)
        for pod in cluster.run_job(ns, f"{job.name}-trainer"):
            cluster.pod_running(ns, pod)
            cluster.log(ns, pod, "step 1")
    wait(lambda: Job.objects.filter(pk__in=[j.pk for j in jobs], state="Running").count() == len(jobs), timeout=120)


def rate(cluster) -> tuple[float, Counter]:
    """Requests per minute received during a quiet window, and what they were."""
    time.sleep(5)  # let one-off work (pod labels, trainer creation) finish
    start = time.monotonic()
    time.sleep(WINDOW)
    seen = [(m, p.split("?")[0]) for t, m, p in list(cluster.requests) if start <= t < start + WINDOW]
    kinds = Counter(f"{m} {'/'.join(p.split('/')[:4]) if '/namespaces/' not in p else p.split('/')[-1]}"
                    for m, p in seen)
    return len(seen) * 60.0 / WINDOW, kinds


def main() -> None:
    with service() as user:
        from accounts.models import Datacenter
        from jobs.tests.k8s_cluster import Cluster
        from quotas.models import Quota

        with Cluster() as cluster:
            dc = Datacenter.objects.create(name="k8s", backend="kubernetes", kubeconfig=cluster.kubeconfig(),
                                           config={"watch_timeout": WATCH_TIMEOUT, "pending_timeout": 3600})
            Quota.objects.create(datacenter=dc, user=None, cpu_millicores=10**6, memory_bytes=2**45,
                                 max_running_jobs=1000)
            results = {}
            running = 0
            for size in SIZES:
                jobs = make_jobs(cluster, user, running, size - running)
                bring_up(cluster, jobs)
                running = size
                streams = sum(1 for _, m, p in cluster.requests if p.split("?")[0].endswith("/log"))
                results[size], kinds = rate(cluster)
                print(f"{size:4d} running jobs ({size * 4} pods): {results[size]:6.1f} API requests/min "
                      f"during {WINDOW:.0f} s; log streams opened so far: {streams} (one per pod, long-lived)")
                for what, n in sorted(kinds.items()):
                    print(f"        {n:4d} x {what}")
            # Stop watching before the emulated cluster goes away (the watcher loop lets go of
            # a datacenter that is no longer kubernetes).
            Datacenter.objects.filter(pk=dc.pk).update(backend="local")
            from jobs.backends.kubernetes import informer as k8s_informer

            k8s_informer.stop_all()
            ratio = results[SIZES[1]] / results[SIZES[0]]
            polling = SIZES[1] * 3 * 60 / 5  # list pods + get StatefulSet + get Job per job every 5 s
            print(f"ratio {SIZES[1]} vs {SIZES[0]} jobs: {ratio:.2f} (goal <= 1.2); "
                  f"polling each job every 5 s would be ~{polling:.0f} requests/min at {SIZES[1]} jobs")
            from report import Row, emit

            emit([Row(f"Kubernetes API requests/min, {SIZES[1]} vs {SIZES[0]} running jobs (emulated cluster)",
                      f"{results[SIZES[0]]:.0f}/min", f"{results[SIZES[1]]:.0f}/min", f"{ratio:.2f}x", "<= 1.2x",
                      ratio <= 1.2)], "Kubernetes status sync")
            sys.exit(0 if ratio <= 1.2 else 1)


if __name__ == "__main__":
    main()
