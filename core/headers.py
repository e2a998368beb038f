"""The head of a raw ASGI request, for the ASGI apps in front of Django."""

from __future__ import annotations

from typing import Any


def header(scope: dict[str, Any], name: bytes) -> str | None:
    """The value of header `name` (lowercase bytes), or None."""
    key: bytes
    value: bytes
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
