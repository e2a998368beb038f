"""What a web process does once, after Django is set up and before it serves."""

import gc

# A young collection runs once this many more objects are tracked than at the last one (CPython's
# default: 700). A request's objects are freed by reference counting once it is answered
# (core/release.py), so what a young collection finds under load is the objects of the requests
# still in flight: it can free none of them, only move them to an older generation, where a full
# collection walks them again. Served at 32 connections (bench/web.py, load average 6-7), 750 job
# details ran about 400 young, 36 middle and 3 full collections at 700 (0.25 ms of each request, by
# `gc.callbacks`); at 10,000, one or two young ones.
YOUNG_COLLECTION = 10_000


def freeze_startup_heap() -> None:
    """A full (generation 2) garbage collection walks every object the collector tracks; the ~130k
    that the app's modules, URLconf and schema make at startup cost ~80 ms a pass, which became the
    p99 of job list requests (bench/job_list.py). Load the URLconf (and with it every view) now,
    then move everything startup made to the permanent generation, so collections only walk what
    requests allocate; and collect the young generation less often (YOUNG_COLLECTION)."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports every view module
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION)  # the older generations' thresholds stay CPython's
