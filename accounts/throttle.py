"""Brute-force protection for every password check (login page, /api/v2 and legacy token
endpoints), on top of django-axes: failures are counted per client address, with a cool-down."""

from __future__ import annotations

from datetime import timedelta

from axes.helpers import get_cool_off
from django.contrib.auth import authenticate
from django.core.exceptions import ValidationError
from rest_framework.throttling import BaseThrottle


def client_address(request) -> str | None:
    """The client's address: REMOTE_ADDR, or with TRUSTED_PROXY_COUNT=N the N-th entry from
    the right of X-Forwarded-For (what the outermost of the operator's proxies saw); entries
    a client adds to the left of those are never used. DRF's throttles use the same rule."""
    return BaseThrottle().get_ident(request)


class LoginThrottled(Exception):
    """Too many failed logins from this client address: refused until the cool-down ends."""

    def __init__(self, wait: timedelta | None):
        self.wait = wait
        minutes = max(1, round(wait.total_seconds() / 60)) if wait else None
        later = f"in {minutes} minute{'s' if minutes != 1 else ''}" if minutes else "later"
        super().__init__(f"too many failed logins from your address; try again {later}")


def check_password(request, username: str, password: str):
    """The user `username` if `password` is theirs and this client is not cooling down.
    Raises LoginThrottled during a cool-down (even for the right password) and
    ValidationError for wrong credentials. `request` is the one django-axes marks."""
    user = authenticate(request, username=username, password=password)
    if getattr(request, "axes_locked_out", False):
        raise LoginThrottled(get_cool_off(request))
    if user is None:
        raise ValidationError("wrong username or password")
    return user
