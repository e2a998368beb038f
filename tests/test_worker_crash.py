"""A Celery worker killed with -9 mid-job, then started again: the job ends in the right state.

The worker here is a real `celery worker -B` process (as in `make run`), sharing the test
database and Redis; the watcher runs in a thread of the test."""

import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from conftest import make_package, running_system
from jobs import runtime, services
from jobs.tests.helpers import job_processes, wait_for, wait_state

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
           "LAUNCH_LEASE_SECONDS": "2", "RECONCILE_INTERVAL": "1"}
    if not os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = settings.REDIS_URL
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "paddleweb", "worker", "-B", "--concurrency", "2",
         "--schedule", str(settings.JOBS_ROOT.parent / "beat-schedule"), "--loglevel", "INFO"],
        cwd=settings.BASE_DIR, env=env, start_new_session=True,
        stdout=open(settings.JOBS_ROOT.parent / "worker.log", "ab"), stderr=subprocess.STDOUT)


def kill_9(worker: subprocess.Popen) -> None:
    try:
        os.killpg(worker.pid, signal.SIGKILL)  # the worker with its pool and beat children
    except ProcessLookupError:
        pass
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
