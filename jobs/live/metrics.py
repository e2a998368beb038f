"""Metric lines printed by training programs, for the job page's loss curves.

Format (one line, anywhere in a replica's output):
    PADDLECLOUD_METRIC {"step": 3, "loss": 0.25, "acc": 0.9}
`step` is required and numeric; every other numeric key becomes a series, but for `wall` (or
`time`): when the step was logged, in Unix seconds (paddlectl.log_metric adds it). A value that is
not a finite float (NaN, infinity, an integer past float's range) is dropped. A job prints anything,
so what is read of a log is bounded: a line longer than MAX_LINE is no metric line, a replica has
at most MAX_SERIES series besides `step` (the first ones seen), and past 2 * MAX_POINTS lines the
series are thinned to every other line, again as often as needed (the last line is always kept).
"""

from __future__ import annotations

import bisect
import json
import math
from typing import TYPE_CHECKING, BinaryIO, TypedDict

from . import logstore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..models import Job
    from .logstore import LogSource

PREFIX = b"PADDLECLOUD_METRIC "
MAX_LINE = 64 << 10  # bytes: a job can make its log one 10 GiB line (ftruncate of its stdout)
MAX_SERIES = 64  # per replica, besides "step": a new key per line would make N series of N cells
MAX_POINTS = 5000  # a series past 2 * MAX_POINTS lines is thinned to every other one

# One replica's series: "step" and every other key, each a list aligned on the metric lines
# (None where a line did not have that key).
Series = dict[str, list[float | None]]


class Metrics(TypedDict):
    replicas: dict[str, Series]  # by replica name, e.g. "trainer-0"


def parse_line(line: bytes) -> dict[str, float] | None:
    at = line.find(PREFIX)
    if at < 0:
        return None
    try:
        values = json.loads(line[at + len(PREFIX):])
    except (ValueError, RecursionError):  # a job may print anything, nested arbitrarily deep
        return None
    if not isinstance(values, dict):
        return None
    numbers = {k: f for k, v in values.items() if (f := _finite(v)) is not None}
    return numbers if "step" in numbers else None


def _finite(value: object) -> float | None:
    """A JSON number as a finite float, else None: NaN and infinity are not JSON for the chart, and
    an integer of any length (JSON allows it) may be past float's range."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


# Keys that say when, not what: the x axis's wall time, never a series of their own.
WALL_KEYS = ("wall", "time")


def _lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of each line of at most MAX_LINE bytes; a longer one is skipped a chunk at a
    time, never held whole."""
    at = 0
    while line := f.readline(MAX_LINE):
        start = at
        at += len(line)
        if len(line) == MAX_LINE and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = f.readline(MAX_LINE)
                at += len(line)
            continue
        yield start, line


def replica_series(replica: LogSource) -> Series:
    """One replica's series, streamed from its log; each line's wall time ("wall") is the line's
    own `wall` (or `time`) key in Unix seconds, else when the watcher saw it written (logstore's
    marks), else null."""
    rows: list[dict[str, float]] = []
    walls: list[float | None] = []
    keys: dict[str, None] = {"step": None}  # the series kept, in the order first seen
    stride, seen = 1, 0  # every stride-th metric line is kept
    last: tuple[dict[str, float], float | None] | None = None
    offsets, seconds = logstore.times(replica)
    try:
        f = open(logstore.path(replica), "rb")  # noqa: SIM115 - apart from `with`: only the open's FileNotFoundError is caught
    except FileNotFoundError:
        return {}
    with f:
        for start, line in _lines(f):
            values = parse_line(line)
            if values is None:
                continue
            wall = next((values.pop(k) for k in WALL_KEYS if k in values), None)
            if wall is None:
                i = bisect.bisect_right(offsets, start)
                wall = seconds[i] if i < len(seconds) else None
            for key in values:
                if key not in keys and len(keys) <= MAX_SERIES:
                    keys[key] = None
            last = ({k: v for k, v in values.items() if k in keys}, wall)
            if seen % stride == 0:
                rows.append(last[0])
                walls.append(wall)
                if len(rows) == 2 * MAX_POINTS:  # thin to every other line, and keep lines half as often
                    del rows[1::2], walls[1::2]
                    stride *= 2
            seen += 1
    if last is None:
        return {}
    if rows[-1] is not last[0]:
        rows.append(last[0])
        walls.append(last[1])
    kept = sorted({key for row in rows for key in row})  # not a key only thinned lines had
    return {"wall": walls, **{key: [row.get(key) for row in rows] for key in kept}}


def parse_metrics(job: Job) -> Metrics:
    """{"replicas": {"trainer-0": {"step": [...], "wall": [...], "loss": [...]}}}, streamed from the logs."""
    out: dict[str, Series] = {}
    for replica in job.replicas.filter(role="trainer"):
        series = replica_series(replica)
        if series:
            out[replica.name] = series
    return {"replicas": out}
