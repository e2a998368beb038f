"""Types for the raw ASGI apps in front of Django: the ASGI spec's callables, with the scope as
the plain dict servers hand over and messages read-only (as Django's handler types them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
