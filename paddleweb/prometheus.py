"""Prometheus metrics at /metrics, behind a bearer token (METRICS_TOKEN; unset: /metrics is 404).

What the web process cannot see itself is read at scrape time, so every web pod answers the same
and nothing is lost when a process restarts:
* jobs by state and datacenter: a count in the database;
* worker and watcher liveness: their heartbeats in Redis (core/health.py);
* restarts of replicas, by datacenter: a sum in the database;
* job queue wait, submit-to-running, watcher pass and log push times: histograms the worker and watcher
  keep in Redis (core/metrics_store.py).
API latency is this process's own (one uvicorn process per web pod): a histogram by view name,
method and status, from the `request_latency` middleware; and before it, how long each request
waited for a request slot (core/request_slots.py).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import cast

import redis
from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.db.models import Count, Sum
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.utils.decorators import sync_and_async_middleware
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from core import health, metrics_store

# Methods outside this set are counted as "other": a client may send any word as its method,
# and each distinct label value would be a new series.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ServiceCollector(Collector):
    """Reads the database and Redis at each scrape (it has no describe(): registering it reads
    nothing)."""

    def collect(self) -> Iterator[Metric]:
        yield self._jobs()
        yield self._restarts()
        try:
            yield from self._from_redis()
            up = 1.0
        except redis.RedisError:  # the rest of the scrape still says what the database knows
            up = 0.0
        yield GaugeMetricFamily("paddlecloud_redis_up", "Whether /metrics could read Redis.", value=up)

    def _jobs(self) -> GaugeMetricFamily:
        from accounts.models import Datacenter
        from jobs.models import Job, JobState

        family = GaugeMetricFamily("paddlecloud_jobs", "Jobs by state and datacenter.",
                                   labels=["state", "datacenter"])
        counts = {(row["state"], row["datacenter__name"]): row["n"]
                  for row in Job.objects.order_by().values("state", "datacenter__name").annotate(n=Count("id"))}
        # Every state of every datacenter, zeros too: a series that appears and vanishes breaks rate().
        for dc in Datacenter.objects.order_by("name").values_list("name", flat=True):
            for state in JobState.values:
                family.add_metric([state, dc], counts.get((state, dc), 0))
        return family

    def _restarts(self) -> GaugeMetricFamily:
        from accounts.models import Datacenter
        from jobs.models import Replica

        family = GaugeMetricFamily("paddlecloud_replica_restarts",
                                   "Restarts of the replicas of the jobs on record, by datacenter.",
                                   labels=["datacenter"])
        sums = dict(Replica.objects.order_by().values_list("job__datacenter__name").annotate(n=Sum("restarts")))
        for dc in Datacenter.objects.order_by("name").values_list("name", flat=True):
            family.add_metric([dc], sums.get(dc) or 0)
        return family

    def _from_redis(self) -> Iterator[Metric]:
        alive = GaugeMetricFamily("paddlecloud_processes_alive",
                                  "Worker and watcher processes whose heartbeat is current.", labels=["role"])
        for role in health.ROLES:
            alive.add_metric([role], len(health.alive(role)))
        yield alive
        for histogram in metrics_store.HISTOGRAMS:
            snap = metrics_store.read(histogram)
            yield HistogramMetricFamily(histogram.name, histogram.documentation, buckets=snap.buckets,
                                        sum_value=snap.sum)


REGISTRY = CollectorRegistry()
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR, ServiceCollector()):
    REGISTRY.register(_collector)

API_LATENCY = Histogram("paddlecloud_http_request_duration_seconds",
                        "Time to answer a request (until its response starts), by view name, method and status.",
                        ["view", "method", "status"], registry=REGISTRY,
                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
# Outside Django's handler: a request waiting for a slot has not reached request_latency yet.
SLOT_WAIT = Histogram("paddlecloud_http_request_slot_wait_seconds",
                      "Time an HTTP request waited for one of this web process's request slots (WEB_REQUEST_SLOTS).",
                      registry=REGISTRY, buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


def _observe(request: HttpRequest, response: HttpResponseBase, started: float) -> None:
    match = request.resolver_match
    view = match.view_name if match else "<unresolved>"  # not the path: a 404 may be any path
    method = request.method if request.method in KNOWN_METHODS else "other"
    API_LATENCY.labels(view, method, str(response.status_code)).observe(time.perf_counter() - started)


Handler = Callable[[HttpRequest], HttpResponseBase]
AsyncHandler = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


@sync_and_async_middleware
def request_latency(get_response: Handler | AsyncHandler) -> Handler | AsyncHandler:
    """Times each request for API_LATENCY, natively under ASGI and WSGI alike."""
    if iscoroutinefunction(get_response):
        get_async = cast(AsyncHandler, get_response)

        async def timed_async(request: HttpRequest) -> HttpResponseBase:
            started = time.perf_counter()
            response = await get_async(request)
            _observe(request, response, started)
            return response
        return timed_async

    get_sync = cast(Handler, get_response)

    def timed(request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = get_sync(request)
        _observe(request, response, started)
        return response
    return timed


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format for a scraper holding METRICS_TOKEN; 404 when none is set, so an
    install that did not ask for metrics does not show it has them."""
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        response = HttpResponse("A bearer token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
