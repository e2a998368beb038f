import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")

app = Celery("paddleweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _reconcile_on_start(sender, **kwargs):
    # A worker killed mid-task comes back to a world that moved on: heal it right away.
    sender.app.send_task("jobs.tasks.reconcile")
