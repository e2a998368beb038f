"""`make run`'s worker (the Procfile's line): one process, its tasks in threads, and the beat
scheduler in a thread of it (paddleweb/celery.py's --beat-thread), so the periodic tasks run
without a beat process of their own (bench/memory.py: the idle tree's memory)."""

import os
import shlex
import subprocess
import sys
import uuid

import psutil
import pytest
from django.conf import settings

from tests.support import wait_for
from tests.test_worker_crash import database_url

pytestmark = pytest.mark.django_db(transaction=True)


def procfile_worker() -> list[str]:
    line = next(ln for ln in (settings.BASE_DIR / "Procfile").read_text().splitlines() if ln.startswith("worker:"))
    command = line.split(":", 1)[1].replace("${PADDLECLOUD_VAR:-var}", str(settings.JOBS_ROOT.parent))
    return shlex.split(command.replace("$PADDLECLOUD_AS", ""))  # run as this test's user


def test_the_procfile_worker_runs_the_periodic_tasks_in_one_process(tmp_path):
    log = tmp_path / "worker.log"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "paddleweb.settings", "DATABASE_URL": database_url(),
           "REDIS_URL": os.environ.get("REDIS_URL") or settings.REDIS_URL, "RECONCILE_INTERVAL": "1",
           "CELERY_QUEUE": f"beat-test-{uuid.uuid4().hex}"}  # its tasks reach no other test's worker
    command = procfile_worker()
    assert command[:2] == ["celery", "-A"] and "--beat-thread" in command
    worker = subprocess.Popen([sys.executable, "-m", *command], cwd=settings.BASE_DIR, env=env,
                              stdout=open(log, "wb"),  # noqa: SIM115 - the child's
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ran = "Task jobs.tasks.reconcile["

        def periodic_runs() -> int:
            return sum(1 for line in log.read_text().splitlines() if ran in line and "succeeded" in line)

        # the first run is the worker's own start-up reconcile; the next ones are the schedule's
        wait_for(lambda: periodic_runs() >= 3, 90, what=lambda: log.read_text()[-3000:])
        assert "Scheduler: Sending due task reconcile" in log.read_text()
        assert psutil.Process(worker.pid).children(recursive=True) == []
    finally:
        os.killpg(worker.pid, 9)
        worker.wait()
