from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from django import template
from django.http import HttpRequest
from django.utils import timezone

from quotas.services import Resources
from quotas.units import format_bytes, format_cpu

from .. import job_page

_V = TypeVar("_V")

register = template.Library()


@register.filter
def duration(value: timedelta | None) -> str:
    return job_page.duration(value)


@register.filter
def resources(value: Resources) -> str:
    """4 CPU · 8.0 GiB · 1 GPU (no GPU part without GPUs)."""
    parts = [f"{format_cpu(value.cpu_millicores)} CPU", format_bytes(value.memory_bytes)]
    return " · ".join(parts + ([f"{value.gpus} GPU"] if value.gpus else []))


@register.simple_tag
def amount(resource: str, n: int | None) -> str:
    """A cluster page figure: CPU in cores, memory in binary units, GPUs as a count; None: no limit."""
    if n is None:
        return "no limit"
    return {"cpu": format_cpu, "memory": format_bytes}.get(resource, str)(n)


@register.simple_tag
def percent(used: int, cap: int | None) -> int:
    return min(100, round(100 * used / cap)) if cap else 0


@register.filter
def clock(seconds: float | None) -> str:
    """A log line's time of day, in the server's time zone (HH:MM:SS); blank when not known."""
    if seconds is None:
        return " " * 8
    return timezone.localtime(datetime.fromtimestamp(seconds, UTC)).strftime("%H:%M:%S")


@register.filter
def get(mapping: Mapping[str, _V], key: str) -> _V | None:
    return mapping.get(key)


@register.filter
def number(value: float | None) -> str:
    """A metric value in 4 significant digits (573.2, 0.004317, 12); blank when none."""
    if value is None:
        return ""
    return f"{value:.4g}"


@register.filter
def sort_key(metric: str, current: str) -> str:
    """The runs table's ?order= for a click on `metric`'s header: best first, then the other way."""
    return f"-{metric}" if current == metric else metric


@register.simple_tag
def query_with(request: HttpRequest, **changes: str) -> str:
    """The request's query string with `changes` set (so sorting keeps the filters)."""
    query = request.GET.copy()
    for key, value in changes.items():
        query[key] = value
    return query.urlencode()
