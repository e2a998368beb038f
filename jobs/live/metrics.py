"""Metric lines printed by training programs, for the job page's loss curves.

Format (one line, anywhere in a replica's output):
    PADDLECLOUD_METRIC {"step": 3, "loss": 0.25, "acc": 0.9}
`step` is required and numeric; every other numeric key becomes a series, but for `wall` (or
`time`): when the step was logged, in Unix seconds (paddlectl.log_metric adds it).
"""

from __future__ import annotations

import bisect
import json
from typing import TYPE_CHECKING, TypedDict

from . import logstore

if TYPE_CHECKING:
    from ..models import Job
    from .logstore import LogSource

PREFIX = b"PADDLECLOUD_METRIC "

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
    if not isinstance(values, dict) or not isinstance(values.get("step"), (int, float)):
        return None
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


# Keys that say when, not what: the x axis's wall time, never a series of their own.
WALL_KEYS = ("wall", "time")


def replica_series(replica: LogSource) -> Series:
    """One replica's series, streamed from its log; each line's wall time ("wall") is the line's
    own `wall` (or `time`) key in Unix seconds, else when the watcher saw it written (logstore's
    marks), else null."""
    rows: list[dict[str, float]] = []
    walls: list[float | None] = []
    offsets, seconds = logstore.times(replica)
    try:
        f = open(logstore.path(replica), "rb")  # noqa: SIM115 - apart from `with`: only the open's FileNotFoundError is caught
    except FileNotFoundError:
        return {}
    with f:
        at = 0
        for line in f:
            values = parse_line(line)
            if values is not None:
                wall = next((values.pop(k) for k in WALL_KEYS if k in values), None)
                if wall is None:
                    i = bisect.bisect_right(offsets, at)
                    wall = seconds[i] if i < len(seconds) else None
                rows.append(values)
                walls.append(wall)
            at += len(line)
    if not rows:
        return {}
    keys = sorted({key for row in rows for key in row})
    return {"wall": walls, **{key: [row.get(key) for row in rows] for key in keys}}


def parse_metrics(job: Job) -> Metrics:
    """{"replicas": {"trainer-0": {"step": [...], "wall": [...], "loss": [...]}}}, streamed from the logs."""
    out: dict[str, Series] = {}
    for replica in job.replicas.filter(role="trainer"):
        series = replica_series(replica)
        if series:
            out[replica.name] = series
    return {"replicas": out}
