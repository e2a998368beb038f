"""The status watcher: observes local replicas, moves jobs on, and streams new log output to
each job's Channels group (one reader per replica, any number of viewers). Kubernetes
datacenters are watched by jobs/backends/k8s_sync.py from the same loop."""

import logging
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from jobs import logstore, notify
from jobs.backends.k8s_sync import KubernetesPart
from jobs.lifecycle import sync_job
from jobs.tasks import jobs_to_watch

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
        stopping = []
        signal.signal(signal.SIGTERM, lambda *a: stopping.append(True))
        watcher = Watcher()
        self.stdout.write("watching jobs")
        try:
            while not stopping:
                close_old_connections()
                try:
                    watcher.tick()
                except Exception:  # e.g. the database restarting: keep watching, say so
                    log.exception("watch pass failed; retrying")
                    time.sleep(5)
                time.sleep(settings.WATCH_INTERVAL)
        except KeyboardInterrupt:
            pass
        finally:
            watcher.stop()
