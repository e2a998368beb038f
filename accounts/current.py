"""The signed-in user of a request, typed as one.

Django's and DRF's stubs type `request.user` as possibly anonymous; behind login_required or
IsAuthenticated (every page and /api/v2 view but the few marked AllowAny) it never is."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest
    from rest_framework.request import Request


def signed_in(request: HttpRequest | Request) -> User:
    """`request.user`, for a view only signed-in users reach (no check is made here)."""
    return cast("User", request.user)
