import os

from celery import Celery, bootsteps
from celery.beat import EmbeddedService
from celery.signals import worker_ready, worker_shutdown
from click import Option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")

app = Celery("paddleweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class ThreadedBeat(bootsteps.StartStopStep):
    """`celery worker --beat-thread`: the beat scheduler in a thread of the worker (`make run`'s
    Procfile). `-B` runs it too, but in a forked process of its own: another copy of the worker's
    memory, one more process of the tree. One worker only, like -B: two would both send every
    periodic task."""

    label = "ThreadedBeat"
    conditional = True

    def __init__(self, worker, beat_thread: bool = False, **kwargs):
        self.enabled = beat_thread
        super().__init__(worker, **kwargs)

    def create(self, worker):
        return EmbeddedService(worker.app, thread=True, schedule_filename=worker.schedule_filename,
                               scheduler_cls=worker.scheduler)


app.user_options["worker"].add(Option(["--beat-thread"], is_flag=True, default=False,
                                      help="Run the beat scheduler in a thread of this worker."))
app.steps["worker"].add(ThreadedBeat)


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
