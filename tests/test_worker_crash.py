"""A Celery worker killed with -9 mid-job, then started again: the job ends in the right state;
and while no worker is alive, /api/v2/health/, the probe command and the pages say so.

The worker here is a real `celery worker -B` process, sharing the test database and Redis; the
watcher runs in a thread of the test."""

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from core import health
from jobs import services
from jobs.backends.local import runtime
from tests.support import job_processes, make_package, running_system, wait_for, wait_state

pytestmark = pytest.mark.django_db(transaction=True)


def database_url() -> str:
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    return f"postgres://{s['USER']}:{s['PASSWORD']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def worker_process() -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "paddleweb.settings", "DATABASE_URL": database_url(),
           "PFS_ROOT": str(settings.PFS_ROOT), "JOBS_ROOT": str(settings.JOBS_ROOT),
           "LOGS_ROOT": str(settings.LOGS_ROOT), "VENVS_ROOT": str(settings.VENVS_ROOT),
           "LAUNCHER_SOCKET": str(settings.LAUNCHER_SOCKET), "JOB_UIDS": settings.JOB_UIDS,
           "LAUNCH_LEASE_SECONDS": "2", "RECONCILE_INTERVAL": "1",
           "HEARTBEAT_INTERVAL": "0.5", "HEARTBEAT_TTL": "2"}
    if not os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = settings.REDIS_URL
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "paddleweb", "worker", "-B", "--concurrency", "2",
         "--schedule", str(settings.JOBS_ROOT.parent / "beat-schedule"), "--loglevel", "INFO"],
        cwd=settings.BASE_DIR, env=env, start_new_session=True,
        stdout=open(settings.JOBS_ROOT.parent / "worker.log", "ab"), stderr=subprocess.STDOUT)


def kill_9(worker: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)  # the worker with its pool and beat children
    worker.wait()


@pytest.fixture
def start_worker():
    """Starts workers; whatever happens in the test, none outlives it (a leftover would take
    the next tests' tasks)."""
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        started.append(worker_process())
        return started[-1]

    yield start
    for worker in started:
        kill_9(worker)


@pytest.fixture
def worker_log():
    yield
    log = settings.JOBS_ROOT.parent / "worker.log"
    if log.exists():
        print(log.read_text()[-5000:])


def test_worker_killed_while_the_job_runs(alice, worker_log, start_worker):
    pkg = make_package(alice, "run", {"train.py": "import time; print('working', flush=True); time.sleep(4)\n"})
    with running_system(worker=False):
        worker = start_worker()
        job = services.submit_job(alice, {"name": "run", "package": pkg, "entry": "python train.py",
                                          "mode": "collective", "trainers": 2})
        wait_state(job, "Running", 60)
        kill_9(worker)
        wait_state(job, "Succeeded", 30)  # the replicas were never the worker's children
        worker = start_worker()
        time.sleep(3)  # the restarted worker reconciles: nothing changes
        job.refresh_from_db()
        assert job.state == "Succeeded"
        kill_9(worker)
    assert job_processes(job) == []
    assert [r.state for r in job.replicas.all()] == ["Succeeded", "Succeeded"]


def test_worker_killed_while_building_the_runtime_is_taken_over_after_restart(alice, worker_log, start_worker):
    # A runtime nobody has built yet, whose install needs no download (pip is in every venv).
    requirements = f"pip>=0.{time.time_ns()}\n"
    pkg = make_package(alice, "build", {"train.py": "print('trained', flush=True)\n",
                                        "requirements.txt": requirements})
    settings.VENVS_ROOT.mkdir(parents=True, exist_ok=True)
    with running_system(worker=False), open(f"{runtime.env_dir(requirements)}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another builder holds the runtime: the launch waits in Building
        worker = start_worker()
        job = services.submit_job(alice, {"name": "build", "package": pkg, "entry": "python train.py",
                                          "mode": "collective", "trainers": 1})
        wait_state(job, "Building", 60)
        time.sleep(1)
        kill_9(worker)
        fcntl.flock(lock, fcntl.LOCK_UN)
        job.refresh_from_db()
        assert job.state == "Building"
        worker = start_worker()
        wait_state(job, "Succeeded", 60)
        kill_9(worker)
    events = list(job.events.filter(replica=None).values_list("state", flat=True))
    assert events == ["Queued", "Building", "Starting", "Running", "Succeeded"]
    wait_for(lambda: not job_processes(job), 10, what="processes to go")


@pytest.fixture
def no_heartbeats():
    """No worker or watcher beats for this test's start (none outlives its test, but a
    heartbeat left by a killed one lasts its time to live)."""
    r = health.redis_client()
    for key in r.scan_iter(f"{health.prefix()}*"):
        r.delete(key)


def _health() -> tuple[int, dict]:
    """The health endpoint as staff see it (with each part)."""
    from django.contrib.auth import get_user_model

    browser = Client()
    browser.force_login(get_user_model().objects.get(username="staff"))
    resp = browser.get("/api/v2/health/")
    return resp.status_code, resp.json()


def _probe(role: str) -> subprocess.CompletedProcess:
    """The Kubernetes liveness command of the worker and watcher pods."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "paddleweb.settings", "REDIS_URL": settings.REDIS_URL}
    return subprocess.run([sys.executable, "-m", "core.health", role], cwd=settings.BASE_DIR, env=env,
                          capture_output=True, text=True, timeout=60)


def test_health_reports_a_worker_killed_with_9(alice, staff, no_heartbeats, start_worker):
    with running_system(worker=False):  # the watcher, in a thread of the test
        worker = start_worker()
        wait_for(lambda: _health()[0] == 200, 60, what="the worker's first heartbeat")
        code, body = _health()
        assert body["status"] == "ok" and body["parts"]["worker"]["up"] and body["parts"]["watcher"]["up"]
        assert _probe("worker").returncode == 0
        kill_9(worker)
        wait_for(lambda: _health()[0] == 503, 30, what="the dead worker to be reported")
        code, body = _health()
        assert body["status"] == "unavailable"
        assert body["parts"]["worker"] == {"up": False, "hosts": []}
        assert body["parts"]["watcher"]["up"] and body["parts"]["db"]["up"] and body["parts"]["redis"]["up"]
        # Parts that still work answer for themselves (the web pod's probes ask this way).
        assert Client().get("/api/v2/health/?only=web,db,redis").status_code == 200
        probe = _probe("worker")
        assert probe.returncode == 1 and "no heartbeat" in probe.stdout


def test_the_health_endpoint_refuses_unknown_parts(db):
    resp = Client().get("/api/v2/health/?only=web,brain")
    assert resp.status_code == 400 and "brain" in resp.json()["only"][0]


def test_pages_show_a_banner_while_no_worker_is_alive(alice, no_heartbeats, start_worker):
    browser = Client()
    browser.force_login(alice)
    with running_system(worker=False):
        wait_for(lambda: health.alive("watcher"), 30, what="the watcher's heartbeat")
        page = browser.get("/jobs/").content.decode()
        assert "No worker is running: queued jobs wait until one starts." in page
        assert "watcher" not in page.split("service-warning")[1].split("</p>")[0]
        start_worker()
        wait_for(lambda: health.alive("worker"), 60, what="the worker's heartbeat")
        assert "service-warning" not in browser.get("/jobs/").content.decode()
    assert "No jobs watcher is running" in browser.get("/jobs/").content.decode()  # its thread stopped
