"""Job list latency against the number of jobs a user has: the API (/api/v2/jobs/, first page
and a page deep in the walk) and the dashboard page (/jobs/), p50 and p99, at 100 jobs and at
BENCH_JOBS (default 100,000): two users, their requests interleaved so that a busy machine slows
both alike. Goal: p99 < 50 ms, and the big list within 1.3x of the small one.

Runs on PostgreSQL (DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/pc_bench) in a
throwaway test database made and dropped by Django's test machinery; jobs are seeded with
bulk_create. On SQLite it runs too, but the goal is about PostgreSQL.
    DATABASE_URL=postgres://... .venv/bin/python bench/job_list.py
"""

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

SMALL, BIG = 100, int(os.environ.get("BENCH_JOBS", "100000"))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "200"))
BATCH = 5000
# Both users' oldest jobs are still running: a full page for `active=true` either way, and for the
# big list the case where a newest-first scan alone would read every ended job first.
ACTIVE = 60


def seed(user, datacenter, count: int) -> None:
    from django.db import connection

    from jobs.models import Job

    for start in range(0, count, BATCH):
        Job.objects.bulk_create(
            Job(user=user, datacenter=datacenter, name=f"job-{i}", k8s_name=f"job-{i}", mode="ps", pservers=1,
                trainers=1, state="Running" if i < ACTIVE else "Succeeded", package="/pfs/local/home/x/pkg",
                entry="python train.py")
            for i in range(start, min(start + BATCH, count)))
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("ANALYZE jobs_job")


def deep_url(api) -> str:
    url, pages = "/api/v2/jobs/", 1
    while pages < 21 and (following := api.get(url).json()["next"]):  # up to 20 pages of 50 into the walk
        url, pages = following, pages + 1
    return url


def timed(get, url: str) -> float:
    start = time.perf_counter()
    res = get(url)
    assert res.status_code == 200, (url, res.status_code)
    return (time.perf_counter() - start) * 1000


def measure(clients: dict[int, tuple]) -> dict[int, dict[str, list[float]]]:
    """The same requests for each user, interleaved, so that a busy machine slows both alike."""
    urls = {n: {"API first page": (api.get, "/api/v2/jobs/"), "API last/21st page": (api.get, deep_url(api)),
                "API active=true": (api.get, "/api/v2/jobs/?active=true"), "page /jobs/": (web.get, "/jobs/")}
            for n, (api, web) in clients.items()}
    times: dict[int, dict[str, list[float]]] = {n: {what: [] for what in urls[n]} for n in clients}
    for round_ in range(REQUESTS + 10):
        for n in clients:
            for what, (get, url) in urls[n].items():
                elapsed = timed(get, url)
                if round_ >= 10:  # the first rounds warm caches and connections
                    times[n][what].append(elapsed)
    return times


def p50_p99(times: list[float]) -> tuple[float, float]:
    return statistics.median(times), statistics.quantiles(times, n=100)[98]


def main() -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment
    from rest_framework.test import APIClient

    from accounts.models import Datacenter
    from accounts.services import issue_token
    from core.startup import freeze_startup_heap

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["testserver"]
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:

        datacenter = Datacenter.objects.create(name="local", backend="local")
        clients = {}
        for n, username in ((SMALL, "bob"), (BIG, "alice")):
            user = get_user_model().objects.create_user(username, password="pw")
            started = time.perf_counter()
            seed(user, datacenter, n)
            print(f"seeded {n} jobs for {username} in {time.perf_counter() - started:.1f} s ({connection.vendor})")
            api, web = APIClient(), Client()
            api.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(user)}")
            web.force_login(user)
            clients[n] = (api, web)
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("EXPLAIN SELECT id FROM jobs_job WHERE user_id = %s AND NOT deleting "
                            "ORDER BY created DESC, id DESC LIMIT 51", [user.pk])
                print("plan of a page:", " / ".join(row[0].strip() for row in cur.fetchall()[:2]))
        freeze_startup_heap()  # as paddleweb/asgi.py does before the server serves
        times = measure(clients)
        print(f"\n{'':20}{'p50/p99 ms at ' + str(SMALL):>20}{'p50/p99 ms at ' + str(BIG):>24}{'p50 ratio':>11}"
              f"{'p99 ratio':>11}")
        slowest, worst = 0.0, 0.0
        for what in times[SMALL]:
            (s50, s99), (b50, b99) = p50_p99(times[SMALL][what]), p50_p99(times[BIG][what])
            slowest, worst = max(slowest, b99), max(worst, b50 / s50)
            print(f"{what:20}{s50:>10.1f} / {s99:>6.1f}{b50:>14.1f} / {b99:>6.1f}"
                  f"{b50 / s50:>10.2f}x{b99 / s99:>10.2f}x")
        print(f"\nN={BIG}: slowest p99 {slowest:.1f} ms (goal < 50), worst p50 ratio {worst:.2f}x (goal <= 1.3)")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
