"""What the job page shows beyond the stored fields: times, training progress with an ETA, and
which parts of the replicas' state are ours rather than the program's (a pserver we stopped after
the trainers succeeded is normal, and its C++ "Termination signal" trace is noise)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from django.db.models import prefetch_related_objects
from django.http import HttpResponse, HttpResponseBase
from django.urls import reverse
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.utils.timesince import timesince

from pfs.transfer import FileSpan, SpanResponse

from . import logs
from .live import logstore, metrics
from .models import TERMINAL_STATES, JobState, ReplicaState

if TYPE_CHECKING:

    from .models import Job, Replica


@dataclass(frozen=True)
class Timing:
    queued: timedelta | None  # waiting in the queue (all waits, so far while still waiting)
    building: timedelta | None  # preparing the runtime (None: it has not built)
    elapsed: timedelta | None  # starting and running, every attempt together (so far, while running)


# What the page counts as the job running: its replicas starting and running.
_RUN_STATES = (JobState.STARTING, JobState.RUNNING)


def timing(job: Job, now: datetime, events: Sequence[tuple[str, datetime]] | None = None) -> Timing:
    """Time spent per phase from the job-level events (state, when), oldest first: a resumed or
    restarted job counts each attempt's run time, not only the latest, and never its suspended
    hours. Without events (the job list), from the job's own times."""
    if not events:
        if job.started is None:
            return Timing(queued=(job.finished or now) - job.created, building=None, elapsed=None)
        return Timing(queued=job.started - job.created, building=None, elapsed=(job.finished or now) - job.started)
    spent: dict[str, timedelta] = {}
    for (state, at), following in zip(events, [*events[1:], None], strict=True):
        until = following[1] if following else (job.finished or now)
        if state not in TERMINAL_STATES:
            key = JobState.RUNNING if state in _RUN_STATES else state
            spent[key] = spent.get(key, timedelta(0)) + max(until - at, timedelta(0))
    return Timing(queued=spent.get(JobState.QUEUED, timedelta(0)), building=spent.get(JobState.BUILDING),
                  elapsed=spent.get(JobState.RUNNING))


def state_times(job: Job) -> list[tuple[str, datetime]]:
    """The job-level events' (state, when), oldest first: what timing() counts."""
    return list(job.events.filter(replica=None).order_by("created", "id").values_list("state", "created"))


@dataclass(frozen=True)
class Progress:
    done: int  # passes every trainer has completed
    total: int
    eta: timedelta | None  # remaining time at the pace so far, while the job runs
    resumed_from: int = 0  # the pass its checkpoint had when the job started (0: started afresh)


# How far back from a log's end to look for the latest metric line (the page polls this).
TAIL_LINES = 2000


def last_metrics(replica: Replica) -> dict[str, float] | None:
    """The replica's latest metric line, read from the end of its log: cheap on any log size."""
    for line in reversed(logstore.tail(replica, TAIL_LINES).text.splitlines()):
        if (values := metrics.parse_line(line.encode())) is not None:
            return values
    return None


def first_metrics(replica: Replica) -> dict[str, float] | None:
    """The replica's first metric line, looked for in its log's first MiB."""
    for line in logstore.read(replica, 0).text.splitlines():
        if (values := metrics.parse_line(line.encode())) is not None:
            return values
    return None


def _pass(values: dict[str, float] | None) -> int:
    return int(values.get("pass", values["step"])) if values else 0


def progress(job: Job, trainers: Iterable[Replica], now: datetime, elapsed: timedelta | None = None) -> Progress | None:
    """Pass X of Y from the trainers' latest metric lines: the slowest trainer's. A line's "pass"
    key when the program gives one, otherwise `step` counts passes (as in examples/fit_a_line,
    one line after each pass). None before any line, or when the lines do not count passes
    (a number past the job's passes). A job whose first line is past pass 1 resumed from a
    checkpoint (of an earlier job of that name, say): the ETA's pace counts only the passes this
    job trained, over `elapsed`, its run time in every attempt (default: since it last started)."""
    trainers = list(trainers)
    latest = [last_metrics(r) for r in trainers]
    if not job.passes or not any(latest):
        return None
    passes = [_pass(values) for values in latest]
    if max(passes) > job.passes:
        return None
    done = min(passes)
    resumed_from = max(0, min(_pass(first_metrics(r)) for r in trainers) - 1)
    if elapsed is None and job.started:
        elapsed = now - job.started
    eta = None
    if job.state == JobState.RUNNING and elapsed and resumed_from < done < job.passes:
        eta = elapsed / (done - resumed_from) * (job.passes - done)
    return Progress(done=done, total=job.passes, eta=eta, resumed_from=resumed_from)


class ListRow(TypedDict):
    """A row of the job list, each cell's text made here: the template reads a dict's keys, with no
    attribute lookups, filters or {% url %} per cell (they were half the page's CPU)."""

    pk: str
    name: str
    url: str  # the job's page; another user's job (a staff view): its admin page
    owner: str
    state: str
    state_class: str
    queue_position: str  # "" unless the job is Queued with a place in its queue
    message: str
    progress: Progress | None
    restarts: str
    mode: str
    pservers: str
    trainers: str
    datacenter: str
    created: str  # ISO 8601 in the current time zone
    submitted_ago: str  # e.g. "2 hours, 3 minutes"
    finished_ago: str  # "" until the job ends
    run_time: str


def list_rows(jobs: Iterable[Job], now: datetime, viewer_id: int) -> list[ListRow]:
    """The job list's rows: each job with its progress while it runs (read from its trainers' log
    tails; ended and waiting jobs need no read)."""
    jobs = list(jobs)
    prefetch_related_objects([j for j in jobs if j.state == JobState.RUNNING], "replicas")
    # Reversed once: a job name (jobs/spec.py's rule, a database constraint too) is made of
    # characters a URL keeps as they are, so each job's URL is this one with its name in place.
    before, after = reverse("jobs:detail", args=[_NAME_PLACEHOLDER]).split(_NAME_PLACEHOLDER)
    rows = []
    for job in jobs:
        running = job.state == JobState.RUNNING
        trainers = [r for r in job.replicas.all() if r.role == "trainer"] if running else []
        own = job.user_id == viewer_id
        rows.append(ListRow(
            pk=str(job.pk), name=job.name,
            url=before + job.name + after if own else reverse("admin:jobs_job_change", args=[job.pk]),
            owner="" if own else job.user.get_username(), state=job.state, state_class=job.state.lower(),
            queue_position=str(job.queue_position) if job.state == JobState.QUEUED and job.queue_position else "",
            message=job.message, progress=progress(job, trainers, now) if running else None,
            restarts=str(job.restarts), mode=job.mode, pservers=str(job.pservers), trainers=str(job.trainers),
            datacenter=job.datacenter.name, created=timezone.localtime(job.created).isoformat(),  # |date:"c"
            submitted_ago=timesince(job.created, now),
            finished_ago=timesince(job.finished, now) if job.finished else "",
            run_time=duration(timing(job, now).elapsed)))
    return rows


_NAME_PLACEHOLDER = "name-in-place"


def stopped_after_success(job: Job, replica: Replica) -> bool:
    """A replica (a pserver) that we stopped because the trainers had all succeeded: the normal end."""
    return job.state == JobState.SUCCEEDED and replica.state == ReplicaState.TERMINATED


# Paddle's C++ side prints this when the process receives our SIGTERM: a "C++ Traceback" banner
# (not always), an "Error Message Summary" banner, then the FatalError line.
_TERMINATION = re.compile(r"FatalError: `Termination signal` is detected")
_TRACE_START = re.compile(r"^-+\nC\+\+ Traceback", re.MULTILINE)
_SUMMARY_START = re.compile(r"^-+\nError Message Summary:", re.MULTILINE)


def _last(pattern: re.Pattern[str], text: str, end: int, start: int = 0) -> int | None:
    found = [m.start() for m in pattern.finditer(text, start, end)]
    return found[-1] if found else None


def split_stop_trace(text: str) -> tuple[str, str]:
    """(log, trace): the log without the trace printed when we stopped the process, and that trace
    ("" when there is none) for the page to fold away."""
    end = _TERMINATION.search(text)
    if end is None:
        return text, ""
    cut = _last(_SUMMARY_START, text, end.start())
    if cut is None:
        cut = text.rfind("\n", 0, end.start()) + 1
    trace = _last(_TRACE_START, text, cut)
    # The traceback belongs to this summary only if no other error's summary comes between them.
    if trace is not None and _last(_SUMMARY_START, text, cut, trace) is None:
        cut = trace
    return text[:cut], text[cut:]


def default_log(job: Job, replicas: Iterable[Replica]) -> str:
    """The log tab to open first: the build's while the job builds (or waits to), else
    trainer-0, whose output is the training's, else the first replica."""
    replicas = list(replicas)
    if job.state in (JobState.QUEUED, JobState.BUILDING) or not replicas:
        return logs.BUILD
    trainers = [r for r in replicas if r.role == "trainer"]
    return (min(trainers, key=lambda r: r.index) if trainers else replicas[0]).name


def duration(value: timedelta | None) -> str:
    """1h 02m 03s, 2m 05s, 7s."""
    if value is None:
        return ""
    seconds = max(0, int(value.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {seconds:02d}s"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"


def log_download(replica: logstore.LogSource, filename: str) -> HttpResponseBase:
    """The replica's whole log as it is now, streamed (zero-copy where the server offers it)."""
    try:
        fd = os.open(logstore.path(replica), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        resp: HttpResponseBase = HttpResponse(b"", content_type="text/plain; charset=utf-8")
    else:
        span = FileSpan(fd, 0, os.fstat(fd).st_size)  # what was written by now; the file may grow
        resp = SpanResponse(span, content_type="text/plain; charset=utf-8")
        resp.file_span = span
        resp["Content-Length"] = str(span.length)
    resp["Content-Disposition"] = content_disposition_header(True, filename) or ""
    return resp
