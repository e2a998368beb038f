import os

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")

app = Celery("paddleweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _reconcile_on_start(sender, **kwargs):
    # A worker killed mid-task comes back to a world that moved on: heal it right away.
    sender.app.send_task("jobs.tasks.reconcile")


_heartbeat = None


@worker_ready.connect
def _start_heartbeat(sender, **kwargs):
    # Seen alive by /api/v2/health/ and the pages until we stop or die (core/health.py).
    from core import health

    global _heartbeat
    _heartbeat = health.Heartbeat("worker")
    _heartbeat.start()


@worker_shutdown.connect
def _stop_heartbeat(sender, **kwargs):
    if _heartbeat is not None:
        _heartbeat.stop()
