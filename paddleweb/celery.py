from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from celery import Celery, bootsteps
from celery.beat import EmbeddedService
from celery.signals import worker_ready, worker_shutdown
from click import Option

if TYPE_CHECKING:
    from core import health

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

    # `worker` is celery's WorkController, with its command-line options set on it as attributes
    # (schedule_filename, scheduler), which its stubs cannot know.
    def __init__(self, worker: Any, beat_thread: bool = False, **kwargs: Any) -> None:
        self.enabled = beat_thread
        super().__init__(worker, **kwargs)

    # celery's stubs say create returns None; a StartStopStep keeps what it returns as .obj.
    def create(self, worker: Any) -> object:  # type: ignore[override]
        return EmbeddedService(worker.app, thread=True, schedule_filename=worker.schedule_filename,
                               scheduler_cls=worker.scheduler)


app.user_options["worker"].add(Option(["--beat-thread"], is_flag=True, default=False,
                                      help="Run the beat scheduler in a thread of this worker."))
app.steps["worker"].add(ThreadedBeat)


@worker_ready.connect
def _reconcile_on_start(sender: Any, **kwargs: Any) -> None:
    # A worker killed mid-task comes back to a world that moved on: heal it right away.
    sender.app.send_task("jobs.tasks.reconcile")


_heartbeat: health.Heartbeat | None = None


@worker_ready.connect
def _start_heartbeat(sender: Any, **kwargs: Any) -> None:
    # Seen alive by /api/v2/health/ and the pages until we stop or die (core/health.py).
    from core import health

    global _heartbeat
    _heartbeat = health.Heartbeat("worker")
    _heartbeat.start()


@worker_shutdown.connect
def _stop_heartbeat(sender: Any, **kwargs: Any) -> None:
    if _heartbeat is not None:
        _heartbeat.stop()
