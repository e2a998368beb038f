"""The status watcher: observes local replicas, moves jobs on, and streams new log output to
each job's Channels group (one reader per replica, any number of viewers). Kubernetes
datacenters are watched by jobs/backends/k8s_sync.py from the same loop."""

import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections, connection

from jobs import logstore, notify
from jobs.backends.k8s_sync import KubernetesPart
from jobs.backends.local import cgroups, sandbox
from jobs.lifecycle import sync_job
from jobs.tasks import jobs_to_watch
from paddleweb import health

log = logging.getLogger(__name__)


class Watcher:
    def __init__(self):
        self.offsets: dict[int, int] = {}  # replica id -> log offset already pushed
        self.kubernetes = KubernetesPart()

    def tick(self) -> None:
        for job in jobs_to_watch().filter(datacenter__backend="local"):
            try:
                sync_job(job)
                self.push_logs(job)
            except Exception:
                log.exception("job %s: watch failed", job.pk)
        self.kubernetes.tick(self.push_logs)

    def stop(self) -> None:
        self.kubernetes.stop()

    def run(self, stopping: threading.Event, interval: float | None = None) -> None:
        """Watch until `stopping` is set (the command, the tests and the benches all run this)."""
        interval = settings.WATCH_INTERVAL if interval is None else interval
        heartbeat = health.Heartbeat("watcher")  # /api/v2/health/ and the pages see us alive
        heartbeat.start()
        # Say at start, not only at the first launch, what the local sandbox cannot enforce here
        # (both probes log what is missing).
        sandbox.probe()
        cgroups.support()
        try:
            while not stopping.is_set():
                close_old_connections()
                try:
                    self.tick()
                except Exception:  # e.g. the database restarting: keep watching, say so
                    log.exception("watch pass failed; retrying")
                    stopping.wait(5)
                stopping.wait(interval)
        finally:
            heartbeat.stop()
            self.stop()
            connection.close()

    def push_logs(self, job) -> None:
        for replica in job.replicas.all():
            start = self.offsets.get(replica.pk)
            if start is None:  # viewers fetch history themselves; push only what is new
                self.offsets[replica.pk] = logstore.size(replica)
                continue
            chunk = logstore.read(replica, start)
            if chunk.text:
                notify.log_data(job.pk, replica.name, chunk.offset, chunk.text, chunk.next_offset)
                self.offsets[replica.pk] = chunk.next_offset


class Command(BaseCommand):
    help = "Watch running jobs: replica states, job outcomes, live logs."

    def handle(self, *args, **options):
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stopping.set())
        self.stdout.write("watching jobs")
        try:
            Watcher().run(stopping)
        except KeyboardInterrupt:
            pass
