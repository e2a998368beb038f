from datetime import timedelta

from django import template
from django.utils import timezone

from .. import job_page
from ..models import Job

register = template.Library()


@register.filter
def run_time(job: Job) -> str:
    """How long the job has run (so far, or in all): empty while it has not started."""
    return job_page.duration(job_page.timing(job, timezone.now()).elapsed)


@register.filter
def duration(value: timedelta | None) -> str:
    return job_page.duration(value)
