"""The signed-in user of a request, typed as one.

Django's and DRF's stubs type `request.user` as possibly anonymous; behind login_required or
IsAuthenticated (every page and /api/v2 view but the few marked AllowAny) it never is."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.http import HttpRequest
from rest_framework.request import Request

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_htmx.middleware import HtmxDetails

    class AuthenticatedHttpRequest(HttpRequest):
        """The request of a page behind login_required (django-stubs' documented pattern), with
        the `htmx` details django-htmx's middleware adds to every request."""

        user: User
        htmx: HtmxDetails

    class AuthenticatedRequest(Request):
        """The request of a DRF view behind IsAuthenticated, for the methods a view defines
        itself (get, post...: DRF's own methods, overridden, must keep taking its Request)."""

        user: User
else:  # at run time, the classes they narrow
    AuthenticatedHttpRequest = HttpRequest
    AuthenticatedRequest = Request


def signed_in(request: HttpRequest | Request) -> User:
    """`request.user`, for a view only signed-in users reach (no check is made here): DRF views,
    whose overridden methods must take DRF's Request."""
    return cast("User", request.user)
