"""Metric lines printed by training programs, for the job page's loss curves.

Format (one line, anywhere in a replica's output):
    PADDLECLOUD_METRIC {"step": 3, "loss": 0.25, "acc": 0.9}
`step` is required and numeric; every other numeric key becomes a series.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypedDict

from . import logstore

if TYPE_CHECKING:
    from ..models import Job

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


def parse_metrics(job: Job) -> Metrics:
    """{"replicas": {"trainer-0": {"step": [...], "loss": [...]}}}, streamed from the logs."""
    out: dict[str, Series] = {}
    for replica in job.replicas.filter(role="trainer"):
        try:
            with open(logstore.path(replica), "rb") as f:
                rows = [values for line in f if (values := parse_line(line)) is not None]
        except FileNotFoundError:
            continue
        if rows:
            keys = sorted({key for row in rows for key in row})
            out[replica.name] = {key: [row.get(key) for row in rows] for key in keys}
    return {"replicas": out}
