"""A throwaway PaddleCloud for benchmarks: its own state directory, database, bundled Redis,
and a real Celery worker plus the jobs watcher in threads — the same parts `make run` starts."""

import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@contextmanager
def service(var_dir: str | None = None):
    """Yields a user with a local datacenter; the worker and watcher run until exit."""
    var = var_dir or tempfile.mkdtemp(prefix="paddlecloud-bench-")
    os.environ["PADDLECLOUD_VAR"] = var
    os.environ.setdefault("VENVS_ROOT", str(ROOT / "var" / "venvs"))  # reuse `make run`'s runtimes
    os.environ.setdefault("WATCH_INTERVAL", "0.1")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")
    import django

    django.setup()
    from celery.contrib.testing.worker import start_worker
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from core import embedded_redis
    from jobs.watch import WatchLoop
    from paddleweb.celery import app

    redis = embedded_redis.ensure_running(settings.EMBEDDED_REDIS_SOCKET) if settings.EMBEDDED_REDIS_SOCKET else None
    call_command("migrate", verbosity=0)
    call_command("bootstrap", password="bench-password", stdout=open(os.devnull, "w"))  # noqa: SIM115 - for the run
    from accounts.models import Datacenter

    # Benchmarks measure overheads, not the queue: their jobs may ask for more CPU than the machine has.
    Datacenter.objects.filter(backend="local").update(capacity_cpu_millicores=1000 * 1000)
    stop = threading.Event()
    thread = threading.Thread(target=WatchLoop().run, args=(stop,), daemon=True)
    thread.start()
    try:
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False):
            yield get_user_model().objects.get(username="admin")
    finally:
        stop.set()
        thread.join(5)
        if redis:
            redis.terminate()


def wait(predicate, timeout=600.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError


def median(values):
    values = sorted(values)
    return values[len(values) // 2]
