"""The local backend's watcher in `manage.py watch_jobs`: every tick, each unsettled job of a
local datacenter is observed (its process keepers' state files) and synced, its new log
output pushed and its replicas' CPU and memory sampled."""

from __future__ import annotations

import logging

from ..base import WatchContext, Watcher
from . import sandbox

log = logging.getLogger(__name__)


class LocalWatcher(Watcher):
    def start(self) -> None:
        # Say at start, not only at the first launch, what the local sandbox cannot enforce here.
        sandbox.log_what_is_missing()

    def tick(self, ctx: WatchContext) -> None:
        for job in ctx.jobs_to_watch().filter(datacenter__backend=self.backend):
            try:
                ctx.sync(job)
                ctx.push_logs(job)
                ctx.record_usage(job)
            except Exception:
                log.exception("job %s: watch failed", job.pk)

    def stop(self) -> None:
        pass  # it holds nothing between ticks: replicas live on in their process keepers
