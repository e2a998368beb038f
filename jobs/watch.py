"""The watch loop (`manage.py watch_jobs`): runs every registered backend's watcher
(jobs/backends/registry.py), which observes its datacenters' replicas and has the lifecycle move
jobs on, and streams new log output (each replica's, and the runtime build's) to each job's
Channels group (one reader per log, any number of viewers): on every pass, and between passes as
soon as it is written (jobs/live/logfollow.py)."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import QuerySet

from accounts.models import Datacenter
from core import health, metrics_store

from .backends import registry
from .backends.base import Watcher
from .lifecycle.storage import StorageCheck
from .lifecycle.sync import sync_job
from .live import usage, wake
from .live.logfollow import LogFollower
from .models import Job, JobState
from .tasks import jobs_to_watch

log = logging.getLogger(__name__)

# After a wake-up, while a job is being launched: a pass this often, for at most this long.
HURRY_INTERVAL = 0.025
HURRY_SECONDS = 10.0


class WatchLoop:
    """The loop, and the WatchContext its backends' watchers call back into."""

    def __init__(self, watchers: list[Watcher] | None = None):
        self.logs = LogFollower()
        self.sampled: dict[int, float] = {}  # job id -> monotonic time of its last usage sample
        self.watchers = registry.watchers() if watchers is None else watchers
        self.storage = StorageCheck()

    # --- WatchContext ---------------------------------------------------------------------
    def jobs_to_watch(self) -> QuerySet[Job]:
        return jobs_to_watch()

    def sync(self, job: Job) -> None:
        sync_job(job)

    def push_logs(self, job: Job) -> None:
        # Local replicas' keepers write their logs and close them once the exit is recorded; a
        # Kubernetes job's logs are appended by this process itself.
        self.logs.follow(job, ends_close_log=job.datacenter.backend == Datacenter.Backend.LOCAL)

    def record_usage(self, job: Job) -> None:
        if not job.is_active:
            self.sampled.pop(job.pk, None)
            return
        now = time.monotonic()
        if now - self.sampled.get(job.pk, -float("inf")) < settings.USAGE_SAMPLE_SECONDS:
            return
        self.sampled[job.pk] = now
        try:
            usage.sample(job, registry.get_backend(job.datacenter).usage)
        except Exception:  # a measurement must never stop the job's watching
            log.exception("job %s: usage sample failed", job.pk)

    # --- the loop -------------------------------------------------------------------------
    def tick(self) -> None:
        started = time.perf_counter()
        for watcher in self.watchers:
            try:
                watcher.tick(self)
            except Exception:
                log.exception("%s watcher: pass failed", watcher.backend)
        # A building job has no replicas to observe yet, only its build log to push.
        building = set()
        for job in Job.objects.filter(state=JobState.BUILDING, deleting=False):
            self.logs.follow(job)
            building.add(job.pk)
        # Watchers may push a job's logs only on some passes (Kubernetes: when it changed), so
        # followed logs are let go once their job is settled, not when a pass skipped them.
        self.logs.retain(building | set(self.jobs_to_watch().values_list("pk", flat=True)))
        try:
            self.storage.tick()
        except Exception:
            log.exception("storage check failed")
        metrics_store.observe(metrics_store.WATCHER_TICK, time.perf_counter() - started)

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        self.logs.close()

    def launching(self) -> bool:
        """Whether a job is being prepared or started: its replicas should be seen running soon."""
        return Job.objects.filter(state__in=[JobState.BUILDING, JobState.STARTING]).exists()

    def run(self, stopping: threading.Event, interval: float | None = None) -> None:
        """Watch until `stopping` is set (the command, the tests and the benches all run this).

        A pass runs every `interval` (WATCH_INTERVAL), and at once when woken: a job changed
        state (jobs/live/wake.py) or a local replica's log was closed (it ended). After a wake-up,
        while some job is being launched, passes come every HURRY_INTERVAL for up to HURRY_SECONDS,
        so a started replica is seen running within tens of milliseconds (bench/launch.py)."""
        interval = settings.WATCH_INTERVAL if interval is None else interval
        heartbeat = health.Heartbeat("watcher")  # /api/v2/health/ and the pages see us alive
        heartbeat.start()
        waker = wake.Waker()
        waker.start()
        for watcher in self.watchers:
            watcher.start()
        hurry_until = 0.0
        try:
            while not stopping.is_set():
                close_old_connections()
                try:
                    self.tick()
                    hurried = time.monotonic() < hurry_until and self.launching()
                except Exception:  # e.g. the database restarting: keep watching, say so
                    log.exception("watch pass failed; retrying")
                    stopping.wait(5)
                    hurried = False
                if self.logs.wait(HURRY_INTERVAL if hurried else interval, stopping, waker):
                    hurry_until = time.monotonic() + HURRY_SECONDS
        finally:
            heartbeat.stop()
            waker.stop()
            self.stop()
            connection.close()

