"""Runs side by side (/runs/): each job's parameters and its trainer-0's final and best value of
every metric, sortable by any of them; and the series of up to MAX_OVERLAID runs for one chart."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import services
from .live import metrics
from .models import Job, Replica

if TYPE_CHECKING:
    from collections.abc import Iterable

    from django.contrib.auth.models import User

MAX_OVERLAID = 10  # runs on one chart: beyond that the curves cannot be told apart
MAX_ROWS = 50  # runs in the table: each is a read of its trainer-0's log
# A metric whose name says it is an error is best when lowest; any other (accuracy, AUC) when highest.
_LOWER_IS_BETTER = re.compile(r"loss|err|cost|perplex|mse|mae|rmse|nll|wer|cer|time|latency", re.IGNORECASE)
NOT_METRICS = ("step", "pass", "wall")


def lower_is_better(name: str) -> bool:
    return bool(_LOWER_IS_BETTER.search(name))


@dataclass(frozen=True)
class Summary:
    final: float | None
    best: float | None
    best_step: float | None


@dataclass
class Run:
    job: Job
    metrics: dict[str, Summary] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, str]:
        job = self.job
        return {"passes": str(job.passes), "trainers": str(job.trainers), "pservers": str(job.pservers),
                "entry": job.entry, "env": " ".join(f"{k}={v}" for k, v in sorted(job.env.items()))}


def first_trainer(job: Job) -> Replica | None:
    """Its trainer-0 (of the prefetched replicas: no query per run)."""
    trainers = [r for r in job.replicas.all() if r.role == "trainer"]
    return min(trainers, key=lambda r: r.index) if trainers else None


def summarize(series: metrics.Series) -> dict[str, Summary]:
    steps = series.get("step", [])
    out = {}
    for name, values in series.items():
        if name in NOT_METRICS:
            continue
        points = [(s, v) for s, v in zip(steps, values, strict=False) if v is not None and math.isfinite(v)]
        if not points:
            continue
        pick = min if lower_is_better(name) else max
        best_step, best = pick(points, key=lambda p: p[1])
        out[name] = Summary(final=points[-1][1], best=best, best_step=best_step)
    return out


def table(jobs: Iterable[Job]) -> tuple[list[Run], list[str]]:
    """A row per job (at most MAX_ROWS) and the metric names any of them has, sorted."""
    rows = []
    for job in list(jobs)[:MAX_ROWS]:
        replica = first_trainer(job)
        rows.append(Run(job, summarize(metrics.replica_series(replica)) if replica else {}))
    names = sorted({name for row in rows for name in row.metrics})
    return rows, names


def sort(rows: list[Run], key: str) -> list[Run]:
    """By a metric's final value ("loss", best first; "-loss": the other way), runs without it
    last; or unchanged (newest first) for an unknown key."""
    name = key.lstrip("-")
    if not name:
        return rows
    flip = key.startswith("-")
    low_first = lower_is_better(name) != flip
    have = [r for r in rows if name in r.metrics and r.metrics[name].final is not None]
    have.sort(key=lambda r: r.metrics[name].final or 0.0, reverse=not low_first)
    return have + [r for r in rows if r not in have]


def overlaid(user: User, names: list[str]) -> tuple[list[Job], str]:
    """The user's jobs named in `names` (blanks and repeats dropped), in that order, and "" — or
    no jobs and why the names cannot be overlaid."""
    wanted = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if len(wanted) > MAX_OVERLAID:
        return [], f"at most {MAX_OVERLAID} runs can be overlaid"
    found = {j.name: j for j in services.visible_jobs(user).filter(name__in=wanted)}
    missing = [n for n in wanted if n not in found]
    if missing:
        return [], "no job named " + ", ".join(missing)
    return [found[n] for n in wanted], ""
