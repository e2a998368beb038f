from typing import Any

from django import template

from quotas.units import format_bytes

register = template.Library()


@register.filter(name="bytes")
def bytes_filter(value: Any) -> str:  # whatever the template holds
    try:
        return format_bytes(int(value))
    except (TypeError, ValueError):
        return ""
