"""Brute-force protection for every password check (login page, /api/v2 and legacy token
endpoints), on top of django-axes: failures are counted per client address and per account,
each with a cool-down.

Per address, `LOGIN_FAILURE_LIMIT` failures (whatever accounts they try) refuse that address.
Per account, `LOGIN_ACCOUNT_FAILURE_LIMIT` failures from anywhere (an attack spread over many
addresses) refuse that account's logins, except from addresses it has logged in from before:
an attacker can slow guessing down but cannot lock the owner out of their usual machines."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt, AccessLog
from django.conf import settings
from django.contrib.auth import authenticate, user_logged_in
from django.core.exceptions import ValidationError
from django.db.models import Sum
from rest_framework.throttling import BaseThrottle

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or with TRUSTED_PROXY_COUNT=N the N-th entry from
    the right of X-Forwarded-For (what the outermost of the operator's proxies saw); entries
    a client adds to the left of those are never used. DRF's throttles use the same rule."""
    return BaseThrottle().get_ident(request)  # type: ignore[arg-type]  # it reads META, as a Django request has


def lockout_parameters(request_or_attempt: HttpRequest | AccessAttempt,
                       credentials: dict[str, Any] | None = None) -> list[str]:
    """django-axes' AXES_LOCKOUT_PARAMETERS: what a failure is counted against for this request.
    Always the address; also the account once it is under attack and the address is new to it
    (the account's failure count is then already past every limit, so the request is refused)."""
    if isinstance(request_or_attempt, AccessAttempt):
        username, address = request_or_attempt.username, request_or_attempt.ip_address
    else:
        username = get_client_username(request_or_attempt, credentials)
        address = getattr(request_or_attempt, "axes_ip_address", None)
    if username and _account_under_attack(username) and not _known_address(username, address):
        return ["ip_address", "username"]
    return ["ip_address"]


def _account_under_attack(username: str) -> bool:
    # django-axes deletes attempts older than the cool-down before counting, so this is a window.
    failures = AccessAttempt.objects.filter(username=username).aggregate(n=Sum("failures_since_start"))["n"]
    return int(failures or 0) >= int(settings.LOGIN_ACCOUNT_FAILURE_LIMIT)


def _known_address(username: str, address: str | None) -> bool:
    return address is not None and AccessLog.objects.filter(username=username, ip_address=address).exists()


class LoginThrottled(Exception):
    """Too many failed logins from this client address: refused until the cool-down ends."""

    def __init__(self, wait: timedelta | None):
        self.wait = wait
        minutes = max(1, round(wait.total_seconds() / 60)) if wait else None
        later = f"in {minutes} minute{'s' if minutes != 1 else ''}" if minutes else "later"
        super().__init__(f"too many failed logins from your address or for this account; try again {later}")


def check_password(request: HttpRequest, username: str, password: str) -> User:
    """The user `username` if `password` is theirs and this client is not cooling down.
    Raises LoginThrottled during a cool-down (even for the right password) and
    ValidationError for wrong credentials. `request` is the one django-axes marks."""
    user = authenticate(request, username=username, password=password)
    if getattr(request, "axes_locked_out", False):
        raise LoginThrottled(get_cool_off(request))
    if user is None:
        raise ValidationError("wrong username or password")
    # A token login is a login: last_login, and django-axes' access log, where the address
    # becomes one this account is known to log in from.
    user_logged_in.send(sender=type(user), request=request, user=user)
    return user
