"""A job's logs as every surface reads them (the page, /api/v2, paddlectl): the runtime build's
log (`build`) and one per replica, each with the state a follower watches, read with the notice
of why lines may be missing; searched whole on the server; merged into one view in the order
they were written."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from django.core.exceptions import ValidationError

from .lifecycle import retention
from .live import logstore
from .models import Job, JobEvent, JobState, Replica, ReplicaState

BUILD = logstore.BUILD
MAX_MATCHES = 1000  # search results per log: enough to read, bounded for a 10 GB log

# The job-level states that mean the build is over, and how it ended.
_BUILD_ENDED: dict[str, str] = {JobState.STARTING: ReplicaState.SUCCEEDED, JobState.RUNNING: ReplicaState.SUCCEEDED,
                JobState.SUCCEEDED: ReplicaState.SUCCEEDED, JobState.FAILED: ReplicaState.FAILED,
                JobState.KILLED: ReplicaState.TERMINATED, JobState.SUSPENDED: ReplicaState.TERMINATED}


def build_state(job: Job) -> str:
    """The build as a replica-like state: Pending before the job's first build, Running while it
    builds, then how its latest build ended (Succeeded once the job went on to start)."""
    if job.state == JobState.BUILDING:
        return ReplicaState.RUNNING
    states = list(JobEvent.objects.filter(job=job, replica=None).order_by("-created", "-id")
                  .values_list("state", flat=True)[:50])
    newer = ""
    for state in states:  # newest first: `newer` is what followed the latest Building
        if state == JobState.BUILDING:
            return _BUILD_ENDED.get(newer, ReplicaState.TERMINATED) if newer else ReplicaState.RUNNING
        newer = state
    return ReplicaState.PENDING if job.is_active else ReplicaState.TERMINATED


def sources(job: Job, replicas: list[Replica] | None = None) -> list[logstore.LogSource]:
    """Every log of the job: the build's (once it has written anything), then the replicas'."""
    replicas = list(job.replicas.all()) if replicas is None else replicas
    build = logstore.build_log(job)
    return [*([build] if logstore.size(build) or job.state == JobState.BUILDING else []), *replicas]


def find(job: Job, name: str) -> logstore.LogSource | None:
    """The job's log called `name` (`build`, or a replica's name), or None."""
    if name == BUILD:
        return logstore.build_log(job)
    return next((r for r in job.replicas.all() if r.name == name), None)


def state(job: Job, source: logstore.LogSource) -> str:
    return source.state if isinstance(source, Replica) else build_state(job)


def read(job: Job, source: logstore.LogSource, *, offset: int | None = None,
         lines: int | None = None) -> logstore.LogChunk:
    """From a byte offset (to resume a follow), or the last `lines` lines (default 100), with why
    lines may be missing. Raises ValidationError for an offset or a line count out of range."""
    try:
        if offset is not None:
            chunk = logstore.read(source, offset)
        else:
            chunk = logstore.tail(source, 100 if lines is None else lines)
    except ValueError as e:
        raise ValidationError({"offset" if offset is not None else "lines": [str(e)]}) from None
    return dataclasses.replace(chunk, notice=retention.notice(job) or logstore.notice(source))


@dataclass(frozen=True)
class MergedLine:
    time: float | None  # Unix seconds when it was written, to about a second (None: unknown)
    replica: str
    text: str


def merged(job: Job, lines: int = 300) -> list[MergedLine]:
    """The last `lines` lines of all the job's logs together, in the order they were written
    (each log's own order kept; lines of unknown time go by their log's last write)."""
    out: list[tuple[float, int, int, MergedLine]] = []
    for rank, source in enumerate(sources(job)):
        chunk = logstore.tail(source, lines)
        if not chunk.text:
            continue
        try:
            last_write = logstore.path(source).stat().st_mtime
        except FileNotFoundError:
            continue
        for n, (text, at) in enumerate(logstore.timed_lines(source, chunk)):
            out.append((at if at is not None else last_write, rank, n, MergedLine(at, source.name, text)))
    out.sort(key=lambda entry: entry[:3])
    return [line for *_, line in out[-lines:]] if lines else []


def search(source: logstore.LogSource, query: str) -> tuple[list[logstore.Match], bool]:
    """The lines of the whole log holding `query` (any case), with their numbers; and whether
    more than the first MAX_MATCHES matched."""
    return logstore.search(source, query, MAX_MATCHES)

