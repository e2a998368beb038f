"""Histograms kept in Redis, for what the worker and the watcher observe: those processes serve no
HTTP and may run in other pods than the web, so an in-process prometheus_client histogram there
could never be scraped. Each observation adds to cumulative bucket counters in one Redis hash;
/metrics (paddleweb/prometheus.py) reads them back. A Redis flush is a counter reset, which
Prometheus's rate() already handles.

Keys: `<CACHE_PREFIX>:metrics:<name>`. Observing never raises: a metric lost while Redis restarts
must not fail a job's transition.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from . import health

log = logging.getLogger(__name__)

# Seconds: from a fraction of a second (a local job on an idle host) to hours (a busy cluster).
JOB_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass(frozen=True)
class Histogram:
    name: str  # the Prometheus family name
    documentation: str
    buckets: Sequence[float]


@dataclass
class Snapshot:
    buckets: list[tuple[str, float]]  # cumulative, ("+Inf", count) last
    sum: float


def observe(histogram: Histogram, value: float) -> None:
    """Count `value` (in seconds) in `histogram`, for every process and pod to see."""
    key = _key(histogram)
    try:
        pipe = health.redis_client().pipeline(transaction=True)
        for bound in histogram.buckets:
            if value <= bound:
                pipe.hincrby(key, _le(bound), 1)
        pipe.hincrby(key, "+Inf", 1)
        pipe.hincrbyfloat(key, "sum", value)
        pipe.execute()
    except redis.RedisError as e:
        log.warning("metric %s not recorded: %s", histogram.name, type(e).__name__)


def _key(histogram: Histogram) -> str:
    return health.redis_key("metrics") + histogram.name


def read(histogram: Histogram) -> Snapshot:
    """The histogram as observed so far (all zero before its first observation)."""
    stored: dict[bytes, bytes] = health.redis_client().hgetall(_key(histogram))  # type: ignore[assignment]
    raw = {k.decode(): v for k, v in stored.items()}
    buckets = [(_le(b), float(raw.get(_le(b), 0))) for b in histogram.buckets]
    buckets.append(("+Inf", float(raw.get("+Inf", 0))))
    return Snapshot(buckets=buckets, sum=float(raw.get("sum", 0)))


def _le(bound: float) -> str:
    return repr(float(bound))


QUEUE_WAIT = Histogram("paddlecloud_job_queue_wait_seconds",
                       "From a job's submission until it left Queued (observed when it reaches Running).",
                       JOB_BUCKETS)
SUBMIT_TO_RUNNING = Histogram("paddlecloud_job_submit_to_running_seconds",
                              "From a job's submission until all its replicas started.", JOB_BUCKETS)
WATCHER_TICK = Histogram("paddlecloud_watcher_tick_seconds",
                         "Time of one watcher pass over every backend's jobs.", TICK_BUCKETS)
LOG_PUSH = Histogram("paddlecloud_log_push_seconds",
                     "From new log output being noticed (inotify) until it was pushed to its viewers.", TICK_BUCKETS)
HISTOGRAMS = (QUEUE_WAIT, SUBMIT_TO_RUNNING, WATCHER_TICK, LOG_PUSH)
