"""Status sync cost on a Kubernetes datacenter: API requests per minute while N jobs run.

The service as `make run` starts it (bench/service.py, at its defaults) has a datacenter on the
emulated Kubernetes API of the tests (jobs/tests/k8s_emulator.py, real HTTP, served by this
process). N parameter-server jobs (2 pservers + 2 trainers each) are submitted over the REST API
and brought to Running by playing the cluster; then every request the API server receives
during a quiet window is counted. Status comes from a few watches of the whole datacenter
(re-opened every `watch_timeout`) and one log stream per pod, so the rate must not grow with N;
polling per job would grow linearly. Goal: rate(100 jobs) / rate(10 jobs) <= 1.2. Prints both
rates and the ratio.

    .venv/bin/python bench/k8s_status_sync.py   (BENCH_WINDOW: seconds counted, 60)
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx
from report import Row, emit
from service import ROOT, Service

if TYPE_CHECKING:
    from jobs.tests.k8s_cluster import Cluster

WATCH_TIMEOUT = 10  # seconds; short, so the window sees every watch re-opened several times
WINDOW = float(os.environ.get("BENCH_WINDOW", "60"))
SIZES = (10, 100)
PACKAGE = "/pfs/k8s/home/admin/jobs/bench"

SETUP = """
from accounts.models import Datacenter
from quotas.models import Quota
dc = Datacenter.objects.create(name="k8s", backend="kubernetes", kubeconfig={kubeconfig!r},
                               config={{"watch_timeout": {watch_timeout}, "pending_timeout": 3600}})
Quota.objects.create(datacenter=dc, user=None, cpu_millicores=10**6, memory_bytes=2**45, max_running_jobs=1000)
"""


def wait(predicate: Callable[[], bool], what: str, api: httpx.Client, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            jobs = api.get("/api/v2/jobs/?limit=200").json()["results"]
            states = Counter(f"{j['state']} {j['reason']}" for j in jobs)
            raise SystemExit(f"timed out waiting for {what}; the jobs: {dict(states)}")
        time.sleep(0.05)


def submit(api: httpx.Client, first: int, count: int) -> list[str]:
    names = [f"bench-{n}" for n in range(first, first + count)]
    for name in names:
        res = api.post("/api/v2/jobs/", json={
            "name": name, "datacenter": "k8s", "package": PACKAGE, "entry": "python train.py",
            "pservers": 2, "trainers": 2, "cpu": "100m", "pscpu": "100m", "memory": "64Mi", "psmemory": "64Mi"})
        if res.status_code != 201:
            raise SystemExit(f"submit {name}: {res.status_code} {res.text}")
    return names


def running(api: httpx.Client) -> int:
    """How many of the user's jobs are Running (every page of the list)."""
    count, url = 0, "/api/v2/jobs/?state=Running&limit=100"
    while url:
        page = api.get(url).json()
        count += len(page["results"])
        url = page["next"]
    return count


def bring_up(cluster: Cluster, api: httpx.Client, ns: str, names: list[str], total: int) -> float:
    """Play the controllers and kubelets until every job is Running; the seconds from the last
    pod running to the API saying every job is Running."""
    began = time.monotonic()
    for name in names:
        wait(lambda name=name: ("statefulsets", f"{name}-pserver") in cluster.objects_in(ns), f"{name}'s pservers", api)
        for pod in cluster.run_statefulset(ns, f"{name}-pserver"):
            cluster.pod_running(ns, pod)
            cluster.log(ns, pod, "pserver ready")
        cluster.statefulset_ready(ns, f"{name}-pserver", 2)
    for name in names:
        wait(lambda name=name: ("jobs", f"{name}-trainer") in cluster.objects_in(ns), f"{name}'s trainers", api)
        for pod in cluster.run_job(ns, f"{name}-trainer"):
            cluster.pod_running(ns, pod)
            cluster.log(ns, pod, "step 1")
    started = time.monotonic()
    wait(lambda: running(api) == total, f"{total} jobs running", api)
    lag = time.monotonic() - started
    print(f"{len(names)} jobs submitted and brought up in {time.monotonic() - began:.0f} s; all {total} Running "
          f"{lag:.1f} s after the last pod", flush=True)
    return lag


def log_streams(cluster: Cluster) -> list[str]:
    """The path of every pod log request the API server has received (one per stream opened)."""
    return [path for _, _, p in list(cluster.requests) if (path := p.split("?")[0]).endswith("/log")]


def settled(cluster: Cluster, api: httpx.Client, pods: int) -> None:
    """Until the one-off work of the start is done: each pod labelled with its index and its log
    stream opened."""
    from jobs.backends.kubernetes.manifests import LABEL_INDEX

    def done() -> bool:
        labelled = sum(LABEL_INDEX in (pod["metadata"].get("labels") or {}) for pod in cluster.store.find("pods"))
        return labelled >= pods and len(set(log_streams(cluster))) >= pods

    wait(done, f"the {pods} pods labelled and their logs followed", api)


def rate(cluster: Cluster, api: httpx.Client, pods: int) -> tuple[float, Counter[str]]:
    """Requests per minute received during a quiet window once the start's one-off work is
    done, and what they were."""
    settled(cluster, api, pods)
    start = time.monotonic()
    time.sleep(WINDOW)
    seen = [(m, p.split("?")[0]) for t, m, p in list(cluster.requests) if start <= t < start + WINDOW]
    kinds = Counter(f"{m} {'/'.join(p.split('/')[:4]) if '/namespaces/' not in p else p.split('/')[-1]}"
                    for m, p in seen)
    return len(seen) * 60.0 / WINDOW, kinds


def emulator() -> type[Cluster]:
    """The tests' emulated cluster, served by this process (it is written with the service's
    code, so Django is set up here on the service's settings; nothing here touches its database)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")
    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the service's logging, set up here too
    from jobs.tests.k8s_cluster import Cluster

    return Cluster


def main() -> None:
    if WINDOW < 2 * WATCH_TIMEOUT:  # a shorter window may see no watch reopened at all: a rate of 0
        raise SystemExit(f"BENCH_WINDOW must be at least {2 * WATCH_TIMEOUT} s (the watches reopen every "
                         f"{WATCH_TIMEOUT} s)")
    with Service(name="k8s-sync") as svc, emulator()() as cluster:
        assert svc.api is not None
        svc.django(SETUP.format(kubeconfig=cluster.kubeconfig(), watch_timeout=WATCH_TIMEOUT))
        res = svc.api.put("/api/v2/files/content/", params={"path": f"{PACKAGE}/train.py"}, content=b"print('hi')\n",
                          headers={"Content-Type": "application/octet-stream"})
        res.raise_for_status()
        from jobs.backends.kubernetes.config import user_namespace

        ns = user_namespace("paddle-", "admin")  # the datacenter's default namespace_prefix
        results, lags = {}, {}
        done = 0
        for size in SIZES:
            lags[size] = bring_up(cluster, svc.api, ns, submit(svc.api, done, size - done), size)
            done = size
            results[size], kinds = rate(cluster, svc.api, size * 4)
            streams = len(log_streams(cluster))
            print(f"{size:4d} running jobs ({size * 4} pods): {results[size]:6.1f} API requests/min "
                  f"during {WINDOW:.0f} s; log streams opened so far: {streams} (one per pod, long-lived)")
            for what, n in sorted(kinds.items()):
                print(f"        {n:4d} x {what}")
        # Stop watching before the emulated cluster goes away (the watcher lets go of a
        # datacenter that is no longer kubernetes); the service stops after it.
        svc.django("from accounts.models import Datacenter; "
                   "Datacenter.objects.filter(name='k8s').update(backend='local')")
    ratio = results[SIZES[1]] / results[SIZES[0]]
    polling = SIZES[1] * 3 * 60 / 5  # list pods + get StatefulSet + get Job per job every 5 s
    print(f"ratio {SIZES[1]} vs {SIZES[0]} jobs: {ratio:.2f} (goal <= 1.2); "
          f"polling each job every 5 s would be ~{polling:.0f} requests/min at {SIZES[1]} jobs")
    emit([Row(f"Kubernetes API requests/min, {SIZES[1]} vs {SIZES[0]} running jobs (emulated cluster)",
              f"{results[SIZES[0]]:.0f}/min", f"{results[SIZES[1]]:.0f}/min", f"{ratio:.2f}x", "<= 1.2x",
              ratio <= 1.2),
          # What a start of many jobs at once waits for its status: no goal of its own.
          Row(f"{SIZES[1] - SIZES[0]} jobs started at once: all {SIZES[1]} shown Running, after the last pod runs",
              f"{lags[SIZES[0]]:.1f} s for {SIZES[0]}", f"{lags[SIZES[1]]:.1f} s", "-", "- (reference)", True)],
         "Kubernetes status sync")
    sys.exit(0 if ratio <= 1.2 else 1)


if __name__ == "__main__":
    main()
