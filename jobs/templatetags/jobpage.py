from datetime import timedelta

from django import template

from .. import job_page

register = template.Library()


@register.filter
def duration(value: timedelta | None) -> str:
    return job_page.duration(value)
