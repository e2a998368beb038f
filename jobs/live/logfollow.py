"""Live log output pushed the moment it is written: the watch loop's one reader per replica.

Between the watch loop's passes this waits on inotify for writes to the followed jobs' log
directories and pushes what is new at once, so a line reaches its viewers in milliseconds rather
than at the next pass. Each push sends all that is new up to MAX_PUSH bytes as one group message,
and pushes are at least BATCH_WINDOW apart, so a replica writing 20,000 lines a second makes
about twenty messages a second, not 20,000. Where inotify cannot be had (not Linux, the watch
limit reached, or LOG_INOTIFY off because another host writes the log files), the loop's passes
still push every WATCH_INTERVAL: inotify only makes pushes sooner, never decides what is sent.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from django.conf import settings
from inotify_simple import INotify, flags

from core import metrics_store

from . import logstore, notify

if TYPE_CHECKING:
    from ..models import Job

log = logging.getLogger(__name__)

# One message per read, capped: the channel layer copies each message to every viewer's channel.
MAX_PUSH = 256 * 1024
# At most this much of one log per pass: every job shares the loop, and a job can grow its log by
# gigabytes at once (ftruncate of its stdout). A log further behind skips to a recent line; the
# viewers' panels see the gap in the offsets and fetch the history from the log API.
MAX_PASS = 4 * MAX_PUSH
# Coalesces a fast writer's lines into few messages; well under the half second viewers may wait.
BATCH_WINDOW = 0.05
# How often a wait looks at `stopping`, so the loop ends promptly.
STOP_CHECK = 0.25
# At most one record a second of when each log's bytes were seen (logstore.mark_time): the merged
# view's timestamps, to about a second, for a small file beside the log.
TIME_MARK_EVERY = 1.0


def _open_inotify() -> INotify | None:
    if not settings.LOG_INOTIFY:
        return None
    try:
        return INotify()
    except OSError as e:  # not Linux, or the per-user instance limit reached
        log.warning("live logs: no inotify (%s); pushing every %ss instead", e, settings.WATCH_INTERVAL)
        return None


class Wakeable(Protocol):
    def fileno(self) -> int: ...

    def drain(self) -> None: ...


class LogFollower:
    """Pushes each followed log's new output once, in order, from a remembered offset: every
    replica's, and the job's build log."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[int, str], int] = {}  # (job id, log name) -> log offset already pushed
        self.marked: dict[tuple[int, str], float] = {}  # (job id, log name) -> monotonic time of its last mark
        self.jobs: dict[int, dict[str, logstore.LogSource]] = {}  # job id -> log file name -> its log
        self._inotify = _open_inotify()
        self._watches: dict[int, int] = {}  # job id -> inotify watch descriptor
        self._wd_jobs: dict[int, int] = {}  # watch descriptor -> job id
        # job id -> its replicas' log names, where their writers close them as the replicas end
        self._ends_close: dict[int, set[str]] = {}
        self._last_push = 0.0
        self._first_pass_done = False
        # A job's log directory appears with its first line, often after the pass that followed
        # it: watching the logs root sees it come, so that first line is not left to the next pass.
        self._root_wd = self._add_watch(settings.LOGS_ROOT, flags.CREATE | flags.MOVED_TO, create=True)

    @property
    def inotify(self) -> bool:
        return self._inotify is not None

    def follow(self, job: Job, ends_close_log: bool = False) -> None:
        """Take the job's current replicas and its build log, watch its log directory, and push what is new.

        A job first followed after the first pass came up while we watched: it may have written
        its first lines before this pass, to viewers who opened its page before they came, so its
        recent lines (up to MAX_PUSH) are pushed; viewers append what continues their panel. Jobs
        found on the first pass (the watcher started) get only what is new: their viewers fetched
        the history themselves, and pushing it all would be a burst of every running job's log.

        `ends_close_log`: the replicas' own writers close their logs once they ended (local
        keepers), so a closed log wakes `wait`; not where this process appends the logs itself."""
        catch_up = self._first_pass_done and job.pk not in self.jobs
        replicas = list(job.replicas.all())
        if ends_close_log:  # the names of the logs whose closing says a replica ended
            self._ends_close[job.pk] = {logstore.path(r).name for r in replicas}
        sources: list[logstore.LogSource] = [logstore.build_log(job), *replicas]
        self.jobs[job.pk] = {logstore.path(s).name: s for s in sources}
        self._watch(job.pk)
        self._push(job.pk, self.jobs[job.pk].values(), catch_up=catch_up)

    def retain(self, job_ids: set[int]) -> None:
        """At the end of a pass, stop following jobs not in `job_ids` (settled or deleted): their
        logs no longer grow."""
        self._first_pass_done = True
        for job_id in set(self.jobs) - job_ids:
            self._ends_close.pop(job_id, None)
            for source in self.jobs.pop(job_id).values():
                self.offsets.pop((job_id, source.name), None)
                self.marked.pop((job_id, source.name), None)
            wd = self._watches.pop(job_id, None)
            if wd is not None and self._inotify is not None:
                self._wd_jobs.pop(wd, None)
                # The directory is gone (job deleted): the kernel dropped the watch itself
                with contextlib.suppress(OSError):
                    self._inotify.rm_watch(wd)

    def wait(self, timeout: float, stopping: threading.Event, wake: Wakeable | None = None) -> bool:
        """Until `timeout` passes or `stopping` is set, push log output as it is written. Returns
        early, True, when `wake` becomes readable (it is drained) or a followed replica closed its
        log (it ended: the loop's next pass should see it now, not in up to `timeout`)."""
        deadline = time.monotonic() + timeout
        while not stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            fds = [f for f in (self._inotify, wake) if f is not None]
            readable, _, _ = select.select(fds, [], [], min(remaining, STOP_CHECK))
            if wake is not None and wake in readable:
                wake.drain()
                return True
            if not readable:
                continue
            noticed = time.monotonic()
            # Let a fast writer's lines gather so that they go out together.
            pause = self._last_push + BATCH_WINDOW - time.monotonic()
            if pause > 0:
                stopping.wait(min(pause, remaining))
            closed = self._push_changed()
            metrics_store.observe(metrics_store.LOG_PUSH, time.monotonic() - noticed)
            if closed:
                return True
        return False

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def _add_watch(self, directory: Path, mask: int, create: bool = False) -> int | None:
        if self._inotify is None:
            return None
        try:
            if create:
                directory.mkdir(parents=True, exist_ok=True)
            wd: int = self._inotify.add_watch(directory, mask)
            return wd
        except FileNotFoundError:
            return None  # nothing written yet: the logs root says when it comes
        except OSError as e:  # e.g. max_user_watches reached: pushed on the loop's passes only
            log.warning("live logs: cannot watch %s (%s); pushing on passes only", directory, e)
            return None

    def _watch(self, job_id: int) -> None:
        if job_id in self._watches:
            return
        # CLOSE_WRITE: a replica's keeper closes its log once the replica's exit is recorded.
        wd = self._add_watch(logstore.job_dir(job_id), flags.MODIFY | flags.CREATE | flags.CLOSE_WRITE)
        if wd is not None:
            self._watches[job_id] = wd
            self._wd_jobs[wd] = job_id

    def _push_changed(self) -> bool:
        """Push what the events say grew; whether a followed log was closed by its writer."""
        assert self._inotify is not None
        changed: dict[int, set[str]] = {}
        closed = False
        for event in self._inotify.read(timeout=0):
            job_id = self._wd_jobs.get(event.wd)
            if job_id is not None:
                changed.setdefault(job_id, set()).add(event.name)
                closed = closed or bool(event.mask & flags.CLOSE_WRITE
                                        and event.name in self._ends_close.get(job_id, ()))
            elif event.wd == self._root_wd and event.name.isdigit() and int(event.name) in self.jobs:
                job_id = int(event.name)
                self._watch(job_id)  # then read what it got before the watch was there
                changed.setdefault(job_id, set()).update(self.jobs[job_id])
            elif event.wd == -1:  # the event queue overflowed: any followed file may have grown
                changed = {job_id: set(files) for job_id, files in self.jobs.items()}
                break
        for job_id, names in changed.items():
            files = self.jobs.get(job_id, {})
            self._push(job_id, [files[n] for n in names if n in files])
        return closed

    def _push(self, job_id: int, replicas: Iterable[logstore.LogSource], catch_up: bool = False) -> None:
        for replica in replicas:
            key = (job_id, replica.name)
            start = self.offsets.get(key)
            if start is None:  # first sight (see follow)
                start = logstore.recent_line_start(replica, MAX_PUSH) if catch_up else logstore.size(replica)
                self.offsets[key] = start
            # Up to the end seen now, not on while the replica writes: chasing a fast writer would
            # send a message per few lines, and starve the other replicas.
            end = logstore.size(replica)
            if end < start:  # the log shrank (its writer truncated it): offsets past its end mean nothing
                start = self.offsets[key] = 0
            if end - start > MAX_PASS:
                start = self.offsets[key] = logstore.recent_line_start(replica, MAX_PASS)
            while start < end:
                chunk = logstore.read(replica, start, MAX_PUSH)
                if not chunk.text:
                    break
                notify.log_data(job_id, replica.name, chunk.offset, chunk.text, chunk.next_offset)
                self.offsets[key] = start = chunk.next_offset
                self._last_push = time.monotonic()
                if self._last_push - self.marked.get(key, -TIME_MARK_EVERY) >= TIME_MARK_EVERY:
                    logstore.mark_time(replica, chunk.next_offset, time.time())
                    self.marked[key] = self._last_push
