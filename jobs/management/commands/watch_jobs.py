"""`manage.py watch_jobs`: the watch loop (jobs/watch.py) until SIGTERM or Ctrl-C."""

import contextlib
import signal
import threading

from django.core.management.base import BaseCommand

from jobs.watch import WatchLoop


class Command(BaseCommand):
    help = "Watch running jobs: replica states, job outcomes, live logs."

    def handle(self, *args: str, **options: object) -> None:
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stopping.set())
        self.stdout.write("watching jobs")
        with contextlib.suppress(KeyboardInterrupt):
            WatchLoop().run(stopping)
