"""The per-account gate in front of every password check: however many addresses a guesser
spreads over, an account's password is checked one attempt at a time, each after a delay that
grows with the account's recent failures, and never the owner locked out for longer than that.

After `n` failures of the account in the past hour (checks still in flight included), its next
check waits `delay(n)`: nothing for the first LOGIN_ACCOUNT_FREE_FAILURES, then 1 s, doubling,
up to LOGIN_ACCOUNT_DELAY_MAX. An attempt that comes sooner is refused before its password is
looked at (so it learns nothing, costs no hash and does not lengthen the delay); the one that
comes first once the delay is over is let through, and reserves the next wait at once, under
a row lock, so parallel attempts cannot all pass.

Addresses wait in two queues, each with its own next time: addresses with a clean record
(the account logged in from there before, or fewer than CLEAN_RECORD_FAILURES failed checks
from there, on any account, in the past day) and the others. An attacker's addresses move to
the second queue once they have failed twice, and hammering there does not delay the owner in
the first. The k-th check of an hour has at least k-1 failures before it, so the next one waits
delay(k) or more: a queue lets m checks through in an hour only if delay(1) + ... + delay(m-1)
is under an hour (68 at the defaults, so 136 for both queues)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from axes.models import AccessLog
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .models import FailedLogin, LoginGate

WINDOW = timedelta(hours=1)  # the failures that set the delay
RECORD_WINDOW = timedelta(days=1)  # an address's record
# An address keeps a clean record until its second failure in a day: room for one typo, and an
# attacker's address competes with the owner for one guess a day.
CLEAN_RECORD_FAILURES = 2


def now() -> datetime:
    return timezone.now()


def delay(failures: int) -> float:
    """Seconds the account's next check waits after `failures` recent failures."""
    free = settings.LOGIN_ACCOUNT_FREE_FAILURES
    if failures <= free:
        return 0.0
    return float(min(settings.LOGIN_ACCOUNT_DELAY_MAX, 2.0 ** min(failures - free - 1, 62)))


@dataclass
class Busy(Exception):
    """The account's queue for this address opens in `wait` seconds."""

    wait: float


def admit(username: str, address: str | None) -> FailedLogin:
    """Let one password check for `username` from `address` start, or raise Busy. The check is
    recorded as a failure until `succeeded()` says otherwise."""
    queue = _queue(username, address, now())
    opens = LoginGate.objects.filter(username=username).values_list(f"{queue}_opens", flat=True).first()
    _refuse_before(opens, now())  # most refusals end here, without a write
    with transaction.atomic(durable=True):  # the reservation is seen by others before the password is hashed
        gate = _locked(username)
        at = now()  # after the lock: the waits are measured from when checks really start
        _refuse_before(getattr(gate, f"{queue}_opens"), at)
        failures = FailedLogin.objects.filter(username=username, at__gt=at - WINDOW).count()
        setattr(gate, f"{queue}_opens", at + timedelta(seconds=delay(failures + 1)))
        gate.save(update_fields=[f"{queue}_opens"])
        return FailedLogin.objects.create(username=username, address=address, at=at)


def succeeded(check: FailedLogin) -> None:
    """The password was right: the check is no failure."""
    check.delete()


def abandoned(check: FailedLogin) -> None:
    """The check never looked at the password (the address was locked out meanwhile)."""
    check.delete()


def sweep() -> int:
    """Forget failures older than any window and gates open for an hour; the number deleted."""
    at = now()
    failures, _ = FailedLogin.objects.filter(at__lte=at - max(WINDOW, RECORD_WINDOW)).delete()
    gates, _ = LoginGate.objects.exclude(clean_opens__gt=at - WINDOW).exclude(other_opens__gt=at - WINDOW).delete()
    return failures + gates


def _locked(username: str) -> LoginGate:
    """The account's gate row, made if need be, locked until the transaction ends."""
    while True:  # a sweep may delete the row between its making and its locking: make it again
        LoginGate.objects.bulk_create([LoginGate(username=username)], ignore_conflicts=True)
        gate = LoginGate.objects.select_for_update().filter(username=username).first()
        if gate is not None:
            return gate


def _queue(username: str, address: str | None, at: datetime) -> str:
    if address is None:
        return "other"
    if AccessLog.objects.filter(username=username, ip_address=address).exists():
        return "clean"
    failed = FailedLogin.objects.filter(address=address, at__gt=at - RECORD_WINDOW).count()
    return "clean" if failed < CLEAN_RECORD_FAILURES else "other"


def _refuse_before(opens: datetime | None, at: datetime) -> None:
    if opens is not None and at < opens:
        raise Busy(wait=(opens - at).total_seconds())


def retry_after(wait: float) -> int:
    """Whole seconds for a Retry-After header: never 0, never short of the wait."""
    return max(1, math.ceil(wait))
