"""Brute force per client address, on every surface that takes a password: django-axes counts
failures per address and refuses that address for a cool-down, whatever password it tries next
and whatever account. (The per-account gate has its own tests: test_login_gate.py.)"""

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import authenticate
from django.test import RequestFactory
from django.utils import timezone

from accounts import throttle

from .conftest import admin_login, form_login, legacy_login, token_login

pytestmark = pytest.mark.django_db

ATTACKER, OWNER, PROXY = "203.0.113.5", "198.51.100.7", "10.0.0.2"


@pytest.fixture(autouse=True)
def failure_limit(settings):
    """A small limit: every wrong password below it costs a full password hash. The account's
    own delay starts later, so these tests see the address's limit alone."""
    settings.AXES_FAILURE_LIMIT = 4
    settings.LOGIN_ACCOUNT_FREE_FAILURES = 100


def test_ninety_wrong_passwords_then_the_right_one_is_still_refused_on_the_login_page(client, alice):
    for _ in range(90):
        assert form_login(client, "wrong").status_code in (200, 429)
    res = form_login(client, "password")
    assert res.status_code == 429
    assert "Too many failed logins from your address" in res.content.decode()
    assert int(res.headers["Retry-After"]) == 15 * 60
    assert "_auth_user_id" not in client.session


def test_ninety_wrong_passwords_then_the_right_one_is_still_refused_by_the_token_endpoint(client, alice):
    for _ in range(90):
        assert token_login(client, "wrong").status_code in (400, 429)
    res = token_login(client, "password")
    assert res.status_code == 429
    assert "too many failed logins from your address" in res.json()["detail"]
    assert int(res.headers["Retry-After"]) > 0
    assert "token" not in res.json()


def test_the_legacy_token_endpoint_answers_a_locked_out_address_in_the_protocols_json(client, alice):
    """/api-token-auth/ speaks protocol-v1's envelope, `{"code", "msg"}`, on a refusal too (the
    old client shows `msg`); never the HTML page."""
    answers = [legacy_login(client, "wrong") for _ in range(settings.AXES_FAILURE_LIMIT + 1)]
    assert [a.status_code for a in answers[:3]] == [400] * 3
    for res in [*answers[3:], legacy_login(client, "password")]:  # the one that reaches the limit too
        assert res.status_code == 429 and res["Content-Type"] == "application/json"
        assert res.json() == {"code": 429, "msg": "too many failed logins from your address; try again in 15 minutes"}
        assert res.headers["Retry-After"] == "900"


def test_the_admin_login_counts_against_the_same_limit(client, staff):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        admin_login(client, "wrong", username="staff")
    res = admin_login(client, "password", username="staff")
    assert "too many failed logins from your address" in res.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_new_x_forwarded_for_on_each_try_does_not_get_round_the_limit(client, alice):
    limit = settings.AXES_FAILURE_LIMIT
    answers = [token_login(client, "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}").status_code
               for i in range(limit + 5)]
    # The attempt that reaches the limit is already answered with the cool-down.
    assert answers[:limit - 1] == [400] * (limit - 1) and set(answers[limit - 1:]) == {429}
    assert token_login(client, "password", HTTP_X_FORWARDED_FOR="192.0.2.200").status_code == 429
    assert form_login(client, "password", HTTP_X_FORWARDED_FOR="192.0.2.201").status_code == 429


def test_an_attacker_elsewhere_cannot_lock_the_owner_out(client, alice):
    for _ in range(settings.AXES_FAILURE_LIMIT * 3):
        token_login(client, "wrong", REMOTE_ADDR=ATTACKER)
    assert token_login(client, "password", REMOTE_ADDR=ATTACKER).status_code == 429
    assert token_login(client, "password", REMOTE_ADDR=OWNER).status_code == 200
    assert form_login(client, "password", REMOTE_ADDR=OWNER).status_code == 302


def test_every_address_of_an_ipv6_network_counts_as_one(client, alice):
    for i in range(settings.AXES_FAILURE_LIMIT):
        token_login(client, "wrong", REMOTE_ADDR=f"2001:db8:5:6::{i + 1:x}")
    assert token_login(client, "password", REMOTE_ADDR="2001:db8:5:6:ffff::1").status_code == 429
    assert token_login(client, "password", REMOTE_ADDR="2001:db8:5:7::1").status_code == 200


def test_logging_in_to_ones_own_account_does_not_reset_the_count(client, alice, bob):
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        assert token_login(client, "wrong").status_code == 400
    assert token_login(client, "password", username="bob").status_code == 200
    assert token_login(client, "wrong").status_code == 429


def test_behind_a_trusted_proxy_the_address_it_saw_counts_not_what_the_client_wrote(client, alice, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    for i in range(settings.AXES_FAILURE_LIMIT):
        # The client forges entries; the proxy appends the address it really saw.
        token_login(client, "wrong", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, {ATTACKER}")
    assert token_login(client, "password", REMOTE_ADDR=PROXY,
                       HTTP_X_FORWARDED_FOR=f"192.0.2.99, {ATTACKER}").status_code == 429
    # Another client through the same proxy is not affected.
    assert token_login(client, "password", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=OWNER).status_code == 200


def test_the_address_may_log_in_again_once_the_cool_down_has_passed(client, alice, settings):
    settings.AXES_COOLOFF_TIME = timezone.timedelta(hours=1)  # no machine is that slow
    for _ in range(settings.AXES_FAILURE_LIMIT):
        token_login(client, "wrong")
    assert token_login(client, "password").status_code == 429
    # The cool-down passes: the failures now date from just over an hour ago.
    ended = timezone.now() - settings.AXES_COOLOFF_TIME - timezone.timedelta(seconds=1)
    AccessAttempt.objects.update(attempt_time=ended)
    assert token_login(client, "password").status_code == 200


def test_a_password_check_that_skips_the_throttle_is_refused(alice):
    """A login form added later that calls authenticate() itself gets nothing, even with the
    right password: every check goes through accounts.throttle.check_password."""
    request = RequestFactory().post("/somewhere/", REMOTE_ADDR=OWNER)
    assert authenticate(request, username="alice", password="password") is None
    assert throttle.check_password(RequestFactory().post("/x/", REMOTE_ADDR=OWNER), "alice", "password") == alice
