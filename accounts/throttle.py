"""Brute-force protection for every password check (login page, admin login, /api/v2 and legacy
token endpoints): all of them call `check_password`.

Per address (django-axes): LOGIN_FAILURE_LIMIT failures, whatever accounts they try, refuse that
address for LOGIN_COOLOFF_MINUTES. Per account (accounts/login_gate.py): one check at a time,
each after a delay that grows with the account's recent failures up to LOGIN_ACCOUNT_DELAY_MAX,
so guessing spread over many addresses stays slow while the owner, at worst, waits that delay."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.auth import authenticate, user_logged_in
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework.throttling import BaseThrottle

from . import login_gate

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

WRONG = "wrong username or password"
_ADMITTED = "paddlecloud_login_gate"  # the request attribute RequireGate looks for


@dataclass
class _Admission:
    username: str
    checked: bool = False  # RequireGate ran: django-axes let the password be checked


def client_address(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or with TRUSTED_PROXY_COUNT=N the N-th entry from
    the right of X-Forwarded-For (what the outermost of the operator's proxies saw); entries
    a client adds to the left of those are never used. DRF's throttles use the same rule.
    An IPv6 client is its /64 (one host may hold all of it), so the limits count networks."""
    ident = BaseThrottle().get_ident(request)  # type: ignore[arg-type]  # it reads META, as a Django request has
    try:
        address = ipaddress.ip_address(ident)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False).network_address)
    return str(address)


class LoginThrottled(Exception):
    """Refused before the password was checked: this address failed too often (`account` False),
    or the account's next check is not due yet. `wait` is how long until it may be."""

    def __init__(self, wait: timedelta | None, account: bool):
        self.wait, self.account = wait, account
        seconds = wait.total_seconds() if wait else None
        if account and seconds is not None:
            text = (f"too many failed logins for this account recently: its next password check may start in "
                    f"{login_gate.retry_after(seconds)} s; try again then")
        else:
            minutes = max(1, round(seconds / 60)) if seconds else None
            later = f"in {minutes} minute{'s' if minutes != 1 else ''}" if minutes else "later"
            text = f"too many failed logins from your address; try again {later}"
        super().__init__(text)

    @property
    def retry_after(self) -> int | None:
        return login_gate.retry_after(self.wait.total_seconds()) if self.wait else None


def check_password(request: HttpRequest, username: str, password: str) -> User:
    """The user `username` if `password` is theirs. Raises LoginThrottled when the address is
    cooling down or the account's next check is not due (even for the right password: the
    answer must not tell), ValidationError for wrong credentials. `request` is the one
    django-axes marks. The caller logs the user in (a session, or user_logged_in for a token)."""
    if len(username) > 150 or "\x00" in username:  # no account has such a name
        raise ValidationError(WRONG)
    credentials = {"username": username}
    if not AxesProxyHandler.is_allowed(request, credentials):
        raise LoginThrottled(get_cool_off(request), account=False)
    try:
        check = login_gate.admit(username, client_address(request))
    except login_gate.Busy as e:
        raise LoginThrottled(timedelta(seconds=e.wait), account=True) from None
    admission = _Admission(username)
    setattr(request, _ADMITTED, admission)
    try:
        user = authenticate(request, username=username, password=password)
    finally:
        delattr(request, _ADMITTED)
    if not admission.checked:  # the address was locked out by a parallel failure meanwhile
        login_gate.abandoned(check)
        raise LoginThrottled(get_cool_off(request), account=False)
    if getattr(request, "axes_locked_out", False):  # this failure reached the address's limit
        raise LoginThrottled(get_cool_off(request), account=False)
    if user is None:
        raise ValidationError(WRONG)
    login_gate.succeeded(check)
    return user


def token_login(request: HttpRequest, username: str, password: str) -> User:
    """check_password for the token endpoints. A token login is a login: last_login, and
    django-axes' access log, where the address becomes one this account has logged in from."""
    user = check_password(request, username, password)
    user_logged_in.send(sender=type(user), request=request, user=user)
    return user


class RequireGate:
    """An authentication backend, after django-axes' and before the one that checks passwords:
    it refuses a password check that did not come through `check_password`, so a login form
    added later cannot skip the per-account gate by calling authenticate() itself."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> None:
        admission = getattr(request, _ADMITTED, None)
        if not isinstance(admission, _Admission) or admission.username != username:
            raise PermissionDenied("password checks go through accounts.throttle.check_password")
        admission.checked = True
        return None


def refusal(request: HttpRequest, exc: LoginThrottled) -> HttpResponse:
    """The 429 answer for a refused login, in the shape of the surface it came to: the legacy
    protocol's `{"code", "msg"}`, /api/v2's `{"detail"}`, or the page."""
    path = request.path
    if path.startswith("/api-token-auth"):
        resp: HttpResponse = JsonResponse({"code": 429, "msg": str(exc)}, status=429)
    elif path.startswith("/api/"):
        resp = JsonResponse({"detail": str(exc)}, status=429)
    else:
        resp = render(request, settings.AXES_LOCKOUT_TEMPLATE, {"message": str(exc)}, status=429)
    if exc.retry_after:
        resp["Retry-After"] = str(exc.retry_after)
    return resp


def lockout_response(request: HttpRequest, *args: Any) -> HttpResponse:
    """django-axes' AXES_LOCKOUT_CALLABLE: its middleware answers with this when a failure has
    just locked the address out (the same answer the views give)."""
    return refusal(request, LoginThrottled(get_cool_off(request), account=False))
