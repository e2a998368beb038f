"""The per-account gate (accounts/login_gate.py): a guesser spread over many addresses gets at
most 136 password checks per account in any hour (68 per queue), parallel guesses cannot slip
through together, and the owner — from a new address, during the attack — has their password
checked within LOGIN_ACCOUNT_DELAY_MAX (60 s). The gate's clock is the test's, so an hour of
attack takes seconds; the requests are real and parallel, through every login surface."""

from datetime import timedelta
from functools import partial
from itertools import count

import pytest
from axes.models import AccessLog
from django.conf import settings
from django.test import Client

from accounts import login_gate
from accounts.models import FailedLogin, LoginGate

from .conftest import admin_login, form_login, legacy_login, most_checks_per_queue, token_login

HOUR = 3600
DEFAULT_DELAYS = [0, 0, 0, 1, 2, 4, 8, 16, 32, 60, 60, 60]  # after the 1st, 2nd, ... failure


def new_addresses():
    return (f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in count(1))


def account_wait(res) -> int | None:
    """The Retry-After of an answer refused by the account's gate (not by the address's limit)."""
    if res.status_code == 429 and "for this account" in res.content.decode():
        return int(res.headers["Retry-After"])
    return None


def test_the_documented_delays_and_bound_are_the_defaults():
    assert [login_gate.delay(n) for n in range(1, 13)] == DEFAULT_DELAYS
    assert most_checks_per_queue(DEFAULT_DELAYS, HOUR) == 68


def fail(clock, n: int, addresses, username="alice"):
    """n wrong passwords checked for `username`, each from a new address, as soon as the gate allows."""
    while n:
        res = token_login(Client(REMOTE_ADDR=next(addresses)), "wrong", username=username)
        if wait := account_wait(res):
            clock.advance(wait)
        else:
            assert res.status_code == 400
            n -= 1


@pytest.mark.django_db
def test_the_delay_doubles_from_one_second_after_three_failures_up_to_a_minute(clock, checks):
    addresses = new_addresses()
    fail(clock, 1, addresses)
    waits = []  # after the 1st check, the 2nd, ...
    while len(waits) < len(DEFAULT_DELAYS):
        res = token_login(Client(REMOTE_ADDR=next(addresses)), "wrong")  # at once after the last check
        wait = account_wait(res)
        waits.append(wait or 0)
        if wait:
            clock.advance(wait)
            assert token_login(Client(REMOTE_ADDR=next(addresses)), "wrong").status_code == 400
    assert waits == DEFAULT_DELAYS
    assert checks.checked == len(DEFAULT_DELAYS) + 1


@pytest.mark.django_db
def test_an_early_attempt_is_refused_unchecked_and_does_not_lengthen_the_wait(clock, checks):
    fail(clock, 5, new_addresses())  # the 5th check was 1 s after the 4th, and the next waits 2 s
    for _ in range(39):
        res = token_login(Client(REMOTE_ADDR="198.51.100.7"), "password")  # even the right password
        assert account_wait(res) in (1, 2) and "token" not in res.json()
        clock.advance(0.05)
    assert checks.checked == 5
    clock.advance(0.05)
    assert token_login(Client(REMOTE_ADDR="198.51.100.7"), "password").status_code == 200


def test_parallel_guesses_get_one_check_per_wait(clock, checks, crowd):
    addresses = new_addresses()

    def burst():
        return crowd.send([partial(token_login, Client(REMOTE_ADDR=next(addresses)), "wrong") for _ in range(12)])

    answers = burst()  # all at once, at the same instant: the first three failures cost no wait
    assert checks.checked == settings.LOGIN_ACCOUNT_FREE_FAILURES + 1
    assert sorted(a.status_code for a in answers) == [400] * 4 + [429] * 8
    assert {account_wait(a) for a in answers if a.status_code == 429} == {1}
    clock.advance(1)
    answers = burst()
    assert checks.checked == 5 and sorted(a.status_code for a in answers) == [400] + [429] * 11


class SpreadAttack:
    """Wrong passwords for alice from many addresses at once, as fast as the gate allows: after
    each burst the clock moves on to the earliest time the gate named, so the attacker is there
    the moment each queue opens. Each burst sends `fresh` requests from addresses never seen
    before and `reused` from addresses that failed before but are still under the per-address
    limit (`pool` fixed addresses instead, when given)."""

    def __init__(self, crowd, fresh: int = 0, reused: int = 0, pool: int = 0, login=token_login):
        self.crowd, self.fresh, self.reused, self.login = crowd, fresh, reused, login
        self.addresses = new_addresses()
        self.pool = [next(self.addresses) for _ in range(pool)]
        self.failures: dict[str, int] = {}

    def burst(self, *extra):
        """One burst (with `extra` requests among it); returns the extra ones' answers and the
        shortest wait the gate named."""
        # Half with a clean record still (one failure), half without (under the address's limit),
        # so each burst has a request for each queue.
        once = [a for a, n in self.failures.items() if n < login_gate.CLEAN_RECORD_FAILURES]
        more = [a for a, n in self.failures.items()
                if login_gate.CLEAN_RECORD_FAILURES <= n < settings.AXES_FAILURE_LIMIT - 1]
        half = self.reused // 2
        reused = (once[-half:] + more[-half:]) if half else []
        addresses = [next(self.addresses) for _ in range(self.fresh)] + reused + self.pool
        calls = [partial(self.login, Client(REMOTE_ADDR=a), "wrong") for a in addresses] + list(extra)
        answers = self.crowd.send(calls)
        self.last = answers[:len(addresses)]
        for address, res in zip(addresses, answers, strict=False):
            assert res.status_code in (400, 429), res.content[:300]
            if res.status_code == 400:
                self.failures[address] = self.failures.get(address, 0) + 1
        waits = [w for w in map(account_wait, answers) if w is not None]
        return answers[len(addresses):], min(waits, default=0)


def test_a_spread_attack_gets_at_most_136_password_checks_in_an_hour(clock, checks, crowd):
    attack = SpreadAttack(crowd, fresh=6, reused=6)
    end = clock.t + timedelta(seconds=HOUR)
    while clock.t < end:
        _, wait = attack.burst()
        clock.advance(wait)
    assert checks.checked <= 2 * most_checks_per_queue(DEFAULT_DELAYS, HOUR) == 136
    # The attacker came back the moment each queue opened, and found both open once a minute.
    assert checks.checked >= 2 * 58, checks.checked


@pytest.mark.parametrize("login, success", [(token_login, 200), (legacy_login, 200), (form_login, 302)])
def test_the_owner_logs_in_from_a_new_address_within_a_minute_during_a_spread_attack(clock, checks, crowd,
                                                                                     login, success):
    attack = SpreadAttack(crowd, fresh=0, pool=11, login=token_login)
    # The attack's addresses compete with the owner's queue until each has failed twice.
    while min(attack.failures.get(a, 0) for a in attack.pool) < login_gate.CLEAN_RECORD_FAILURES:
        _, wait = attack.burst()
        clock.advance(wait)
    clock.advance(wait / 2)  # mid-way through a wait
    owner = partial(login, Client(REMOTE_ADDR="198.51.100.7"), "password")
    started, answers = clock.t, []
    while not answers or answers[-1].status_code != success:
        (res,), wait = attack.burst(owner)
        answers.append(res)
        assert res.status_code in (success, 429), res.content[:300]
        if res.status_code == 429:  # the owner comes back when told; the attack goes on meanwhile
            owner_back = clock.t + timedelta(seconds=int(res.headers["Retry-After"]))
            while clock.t + timedelta(seconds=max(wait, 1)) < owner_back:
                clock.advance(max(wait, 1))
                _, wait = attack.burst()
            clock.t = owner_back
    assert (clock.t - started).total_seconds() <= settings.LOGIN_ACCOUNT_DELAY_MAX
    assert len(answers) <= 2
    assert any(map(account_wait, attack.last))  # the attack was there with the owner, and refused


@pytest.mark.django_db
def test_an_address_the_account_logged_in_from_stays_in_the_owners_queue_after_typos(clock, checks, bob):
    assert token_login(Client(REMOTE_ADDR="198.51.100.7"), "password").status_code == 200
    assert AccessLog.objects.filter(username="alice", ip_address="198.51.100.7").exists()
    for _ in range(3):
        assert token_login(Client(REMOTE_ADDR="198.51.100.7"), "typo").status_code == 400
    # An attacker's addresses that failed twice already (on any account) wait in the other queue.
    attackers = [f"203.0.113.{i}" for i in range(3)]
    for address in attackers:
        for _ in range(2):
            res = token_login(Client(REMOTE_ADDR=address), "wrong", username="bob")
            if wait := account_wait(res):  # bob's own gate
                clock.advance(wait)
                res = token_login(Client(REMOTE_ADDR=address), "wrong", username="bob")
            assert res.status_code == 400
    answers = [token_login(Client(REMOTE_ADDR=a), "wrong").status_code for a in attackers]
    assert answers == [400, 429, 429]  # the 4th failure of the hour: the other queue waits 1 s
    assert token_login(Client(REMOTE_ADDR="198.51.100.7"), "password").status_code == 200


@pytest.mark.django_db
def test_failures_older_than_an_hour_no_longer_delay_the_account(clock, checks):
    addresses = new_addresses()
    fail(clock, 8, addresses)
    assert account_wait(token_login(Client(REMOTE_ADDR=next(addresses)), "wrong")) == 16
    clock.advance(HOUR)
    for _ in range(4):
        assert token_login(Client(REMOTE_ADDR=next(addresses)), "wrong").status_code == 400
    assert account_wait(token_login(Client(REMOTE_ADDR=next(addresses)), "wrong")) == 1


@pytest.mark.django_db
def test_other_accounts_are_not_delayed_and_unknown_ones_are_delayed_alike(clock, checks, bob):
    addresses = new_addresses()
    for name in ("alice", "nobody"):
        answers = [token_login(Client(REMOTE_ADDR=next(addresses)), "wrong", username=name) for _ in range(6)]
        # An account that does not exist answers as one that does: no telling which names exist.
        assert [a.status_code for a in answers] == [400] * 4 + [429] * 2
    assert token_login(Client(REMOTE_ADDR=next(addresses)), "password", username="bob").status_code == 200


@pytest.mark.django_db
def test_the_login_page_and_the_admin_say_how_long_to_wait(clock, checks, staff):
    staff.set_password("password")
    staff.save()
    addresses = new_addresses()
    for _ in range(4):
        form_login(Client(REMOTE_ADDR=next(addresses)), "wrong", username="staff")
    page = form_login(Client(REMOTE_ADDR=next(addresses)), "password", username="staff")
    assert page.status_code == 429 and page.headers["Retry-After"] == "1"
    assert "its next password check may start in 1 s" in page.content.decode()
    admin = admin_login(Client(REMOTE_ADDR=next(addresses)), "password", username="staff")
    assert "its next password check may start in 1 s" in admin.content.decode()
    clock.advance(1)
    browser = Client(REMOTE_ADDR=next(addresses))
    assert admin_login(browser, "password", username="staff").status_code == 302
    assert browser.get("/admin/").status_code == 200


@pytest.mark.django_db
def test_records_older_than_a_day_and_idle_gates_are_swept(clock, checks):
    for i in range(5):
        token_login(Client(REMOTE_ADDR=f"192.0.2.{i}"), "wrong")
    clock.advance(HOUR + 60)
    token_login(Client(REMOTE_ADDR="192.0.2.9"), "wrong", username="bob")
    assert login_gate.sweep() == 1  # alice's gate: open for an hour; her failures still count for their addresses
    clock.advance(24 * HOUR)
    assert login_gate.sweep() == 5 + 1
    assert not FailedLogin.objects.exists() and not LoginGate.objects.exists()
