"""What a web process does once, after Django is set up and before it serves."""

import gc


def freeze_startup_heap() -> None:
    """A full (generation 2) garbage collection walks every object the collector tracks; the ~130k
    that the app's modules, URLconf and schema make at startup cost ~80 ms a pass, which became the
    p99 of job list requests (bench/job_list.py). Load the URLconf (and with it every view) now,
    then move everything startup made to the permanent generation, so collections only walk what
    requests allocate."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports every view module
    gc.collect()
    gc.freeze()
