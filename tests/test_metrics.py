"""/metrics: Prometheus text scraped through the real URL, after real jobs ran on the local backend."""

import json
import re

import pytest
from django.conf import settings
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from core import health
from jobs.backends.local.backend import LocalBackend
from jobs.lifecycle.sync import sync_job
from jobs.models import Job
from jobs.tasks import launch_job
from jobs.tests.test_local_backend import run_until_done, submit
from jobs.watch import WatchLoop
from pfs.services import home_of
from tests.support import wait_for

TOKEN = "s3cret-scrape-token"

# Trainers end only once the test has seen the job Running (its signal file in the home): one that
# ended before any pass saw all its replicas started would take the job from Starting straight to
# its end, never observed Running, and on a busy machine no fixed sleep is long enough.
WORKLOAD = """
import os, sys, time
if os.environ["TRAINING_ROLE"] == "PSERVER":
    time.sleep(600)
go = os.path.join(os.environ["PADDLE_PFS_HOME"], "go-" + os.environ["PADDLE_JOB_NAME"])
deadline = time.monotonic() + 240
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(3 if os.environ.get("FAIL_TRAINER") == os.environ["PADDLE_TRAINER_ID"] else 0)
"""


def run_seen_running(job: Job) -> Job:
    """Launch the job and observe it until it runs, then let its trainers end; run it to its end."""
    launch_job(job.pk)

    def running() -> bool:
        job.refresh_from_db()
        sync_job(job)
        return job.state == "Running"

    wait_for(running, 60, what=lambda: f"job {job.name} to run (state {job.state}: {job.message})")
    (home_of(job.user, "local").disk / f"go-{job.name}").touch()
    return run_until_done(job)


@pytest.fixture
def scrape(settings):
    settings.METRICS_TOKEN = TOKEN

    def get() -> dict[tuple[str, frozenset], float]:
        response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200, response.content
        assert response["Content-Type"].startswith("text/plain; version=")
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}
    return get


def value(samples, name, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_is_not_found_when_no_token_is_configured(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


@pytest.mark.django_db
def test_metrics_answers_only_the_configured_bearer_token(client, settings):
    settings.METRICS_TOKEN = TOKEN
    for header in (None, "Bearer wrong", f"Token {TOKEN}", f"Basic {TOKEN}", f"Bearer {TOKEN}x"):
        response = client.get("/metrics", **({"HTTP_AUTHORIZATION": header} if header else {}))
        assert response.status_code == 401, header
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert b"paddlecloud" not in response.content
    ok = client.get("/metrics", HTTP_AUTHORIZATION=f"bearer {TOKEN}")
    assert ok.status_code == 200
    assert b"paddlecloud_jobs" in ok.content
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405


@pytest.mark.django_db(transaction=True)
def test_a_scrape_after_jobs_ran_counts_them_by_state_and_observes_their_waits(alice, scrape):
    before = scrape()
    try:
        ok = run_seen_running(submit(alice, "ok", {"train.py": WORKLOAD}))
        failed = run_seen_running(submit(alice, "bad", {"train.py": WORKLOAD}, env={"FAIL_TRAINER": "1"}))
    finally:
        for job in Job.objects.select_related("datacenter"):
            LocalBackend(job.datacenter).delete(job)
    assert (ok.state, failed.state) == ("Succeeded", "Failed")
    after = scrape()

    jobs = {state: value(after, "paddlecloud_jobs", state=state, datacenter="local")
            for state in ("Queued", "Building", "Starting", "Running", "Succeeded", "Failed", "Killed")}
    assert jobs == {"Queued": 0, "Building": 0, "Starting": 0, "Running": 0, "Succeeded": 1, "Failed": 1, "Killed": 0}

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    waits, to_running = [], []
    for job in (ok, failed):
        events = list(job.events.filter(replica=None).values_list("state", "created"))
        assert [s for s, _ in events][:4] == ["Queued", "Building", "Starting", "Running"]
        waits.append((events[1][1] - events[0][1]).total_seconds())
        to_running.append((events[3][1] - events[0][1]).total_seconds())
    assert grew("paddlecloud_job_queue_wait_seconds_count") == 2
    assert grew("paddlecloud_job_queue_wait_seconds_sum") == pytest.approx(sum(waits), abs=1e-6)
    assert grew("paddlecloud_job_submit_to_running_seconds_count") == 2
    assert grew("paddlecloud_job_submit_to_running_seconds_sum") == pytest.approx(sum(to_running), abs=1e-6)
    # Cumulative buckets: each job is in every bucket at or above its time.
    assert grew("paddlecloud_job_submit_to_running_seconds_bucket", le="+Inf") == 2
    assert grew("paddlecloud_job_submit_to_running_seconds_bucket", le="3600.0") == 2
    assert grew("paddlecloud_job_queue_wait_seconds_bucket", le="0.5") == sum(w <= 0.5 for w in waits)
    # The previous scrape itself was timed, by view name, method and status.
    assert value(after, "paddlecloud_http_request_duration_seconds_count", view="metrics", method="GET",
                 status="200") >= 1


@pytest.mark.django_db
def test_api_latency_is_labelled_by_view_name_not_path(alice_api, scrape):
    before = scrape()
    assert alice_api.get("/api/v2/jobs/").status_code == 200
    assert alice_api.get("/api/v2/jobs/999999/").status_code == 404
    assert Client().get("/no/such/path/at/all").status_code == 404
    assert Client().generic("BREW", "/api/v2/jobs/").status_code in (401, 405)
    after = scrape()
    name = "paddlecloud_http_request_duration_seconds_count"

    def grew(**labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew(view="api:job-list", method="GET", status="200") == 1
    assert grew(view="api:job-detail", method="GET", status="404") == 1
    assert grew(view="<unresolved>", method="GET", status="404") == 1
    assert sum(v for (n, labels), v in after.items() if n == name and ("method", "other") in labels) >= 1
    assert not [labels for (n, labels), _ in after.items() if n == name and ("method", "BREW") in labels]


@pytest.mark.django_db
def test_worker_and_watcher_liveness_come_from_their_heartbeats(scrape):
    base = scrape()
    health.beat("worker", "metrics-test-host")
    try:
        now = scrape()
        assert value(now, "paddlecloud_processes_alive", role="worker") == \
            value(base, "paddlecloud_processes_alive", role="worker") + 1
    finally:
        health.forget("worker", "metrics-test-host")
    assert value(scrape(), "paddlecloud_processes_alive", role="worker") == \
        value(base, "paddlecloud_processes_alive", role="worker")
    assert value(base, "paddlecloud_redis_up") == 1


@pytest.mark.django_db
def test_each_watcher_pass_is_timed(scrape):
    before = scrape()
    WatchLoop(watchers=[]).tick()
    WatchLoop(watchers=[]).tick()
    after = scrape()
    name = "paddlecloud_watcher_tick_seconds_count"
    assert value(after, name) - value(before, name) == 2


@pytest.mark.django_db
def test_a_scrape_without_redis_still_counts_jobs_and_says_redis_is_down(datacenter, scrape, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    samples = scrape()
    assert value(samples, "paddlecloud_redis_up") == 0
    assert value(samples, "paddlecloud_jobs", state="Queued", datacenter="local") == 0
    assert ("paddlecloud_jobs", frozenset({"state": "Queued", "datacenter": "local"}.items())) in samples


@pytest.mark.django_db
def test_the_grafana_dashboard_queries_only_metrics_that_are_served(datacenter, scrape):
    dashboard = json.loads((settings.BASE_DIR / "deploy" / "grafana" / "paddlecloud.json").read_text())
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"\bpaddlecloud_[a-z_]+", target["expr"])}
    scrape()  # so this process has timed a request
    served = {name for name, _ in scrape()}
    assert used and used <= served, used - served


@pytest.mark.django_db(transaction=True)
async def test_requests_served_under_asgi_are_timed_too(settings):
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    from paddleweb.prometheus import REGISTRY

    settings.METRICS_TOKEN = TOKEN
    labels = {"view": "metrics", "method": "GET", "status": "200"}

    @sync_to_async
    def count():  # the registry's collectors read the database
        return REGISTRY.get_sample_value("paddlecloud_http_request_duration_seconds_count", labels) or 0

    before = await count()
    response = await AsyncClient().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert await count() == before + 1


@pytest.mark.django_db
def test_replica_restarts_are_summed_by_datacenter(alice, datacenter, scrape):
    from jobs.models import Replica
    from tests.support import make_job

    for name, restarts in (("one", (2, 0)), ("two", (1, 3))):
        job = make_job(alice, datacenter, name=name)
        Replica.objects.bulk_create(Replica(job=job, role="trainer", index=i, restarts=n)
                                    for i, n in enumerate(restarts))
    assert value(scrape(), "paddlecloud_replica_restarts", datacenter="local") == 6



def test_installs_sharing_one_redis_see_only_their_own_metrics_and_heartbeats(settings):
    from core import metrics_store

    hist = metrics_store.Histogram("paddlecloud_test_shared_redis_seconds", "a test histogram", (1.0,))
    caches = settings.CACHES
    other = {**caches, "default": {**caches["default"], "KEY_PREFIX": caches["default"]["KEY_PREFIX"] + "-other"}}
    settings.CACHES = other  # another install on the same Redis
    metrics_store.observe(hist, 0.5)
    health.beat("worker", "other-host")
    try:
        settings.CACHES = caches
        assert metrics_store.read(hist).buckets[-1] == ("+Inf", 0.0)
        assert "other-host" not in health.alive("worker")
        settings.CACHES = other
        assert metrics_store.read(hist).buckets[-1] == ("+Inf", 1.0)
        assert "other-host" in health.alive("worker")
    finally:
        settings.CACHES = other
        health.forget("worker", "other-host")
        health.redis_client().delete(metrics_store._key(hist))
