"""Brute force on the login page and the token endpoint: django-axes counts failures per client
address and refuses that address for a cool-down, whatever password it tries next; an attack
spread over many addresses is refused per account, except from the owner's known addresses."""

import time

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.utils import timezone

pytestmark = pytest.mark.django_db

ATTACKER, OWNER, PROXY = "203.0.113.5", "198.51.100.7", "10.0.0.2"


@pytest.fixture(autouse=True)
def failure_limit(settings):
    """A small limit: every wrong password below it costs a full password hash."""
    settings.AXES_FAILURE_LIMIT = 4


def token_login(client, password, username="alice", **headers):
    return client.post("/api/v2/auth/token/", {"username": username, "password": password},
                       content_type="application/json", **headers)


def form_login(client, password, username="alice", **headers):
    return client.post("/login/", {"username": username, "password": password}, **headers)


def test_ninety_wrong_passwords_then_the_right_one_is_still_refused_on_the_login_page(client, alice):
    for _ in range(90):
        assert form_login(client, "wrong").status_code in (200, 429)
    res = form_login(client, "password")
    assert res.status_code == 429
    assert "Too many failed logins" in res.content.decode()
    assert "_auth_user_id" not in client.session


def test_ninety_wrong_passwords_then_the_right_one_is_still_refused_by_the_token_endpoint(client, alice):
    for _ in range(90):
        assert token_login(client, "wrong").status_code in (400, 429)
    res = token_login(client, "password")
    assert res.status_code == 429
    assert "too many failed logins from your address" in res.json()["detail"]
    assert int(res.headers["Retry-After"]) > 0
    assert "token" not in res.json()


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
    settings.AXES_COOLOFF_TIME = timezone.timedelta(seconds=5)  # longer than a slow request takes
    for _ in range(settings.AXES_FAILURE_LIMIT):
        token_login(client, "wrong")
    assert token_login(client, "password").status_code == 429
    last = AccessAttempt.objects.get().attempt_time
    while timezone.now() <= last + settings.AXES_COOLOFF_TIME:  # the clock passing the end of the cool-down
        time.sleep(0.05)
    assert token_login(client, "password").status_code == 200


def spread_attack(client, failures, username="alice"):
    """Wrong passwords for one account from many addresses, each far below the address limit."""
    for i in range(failures):
        assert token_login(client, "wrong", username=username, REMOTE_ADDR=f"192.0.2.{i}").status_code in (400, 429)


def test_an_attack_spread_over_many_addresses_is_refused_per_account(client, alice, settings):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 6
    spread_attack(client, settings.LOGIN_ACCOUNT_FAILURE_LIMIT)
    # The next guess, from yet another address, is refused whatever the password.
    res = token_login(client, "password", REMOTE_ADDR="192.0.2.250")
    assert res.status_code == 429 and "token" not in res.json()
    assert form_login(client, "password", REMOTE_ADDR="192.0.2.251").status_code == 429


def test_below_the_account_limit_a_spread_attack_does_not_refuse_the_account(client, alice, settings):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 6
    spread_attack(client, settings.LOGIN_ACCOUNT_FAILURE_LIMIT - 1)
    assert token_login(client, "password", REMOTE_ADDR="192.0.2.250").status_code == 200


def test_the_owner_still_logs_in_from_an_address_they_used_before_during_a_spread_attack(client, alice, settings):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 6
    assert form_login(client, "password", REMOTE_ADDR=OWNER).status_code == 302
    client.logout()
    assert token_login(client, "password", REMOTE_ADDR="198.51.100.8").status_code == 200
    spread_attack(client, settings.LOGIN_ACCOUNT_FAILURE_LIMIT * 2)
    assert form_login(client, "password", REMOTE_ADDR=OWNER).status_code == 302
    assert token_login(client, "password", REMOTE_ADDR="198.51.100.8").status_code == 200
    assert token_login(client, "password", REMOTE_ADDR="192.0.2.250").status_code == 429


def test_a_spread_attack_on_one_account_leaves_other_accounts_alone(client, alice, bob, settings):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 6
    spread_attack(client, settings.LOGIN_ACCOUNT_FAILURE_LIMIT)
    assert token_login(client, "password", username="bob", REMOTE_ADDR="192.0.2.250").status_code == 200


def test_the_account_may_log_in_from_anywhere_once_the_cool_down_has_passed(client, alice, settings):
    settings.LOGIN_ACCOUNT_FAILURE_LIMIT = 6
    settings.AXES_COOLOFF_TIME = timezone.timedelta(seconds=5)  # longer than a slow request takes
    spread_attack(client, settings.LOGIN_ACCOUNT_FAILURE_LIMIT)
    assert token_login(client, "password", REMOTE_ADDR="192.0.2.250").status_code == 429
    last = AccessAttempt.objects.order_by("attempt_time").last().attempt_time
    while timezone.now() <= last + settings.AXES_COOLOFF_TIME:  # the clock passing the end of the cool-down
        time.sleep(0.05)
    assert token_login(client, "password", REMOTE_ADDR="192.0.2.250").status_code == 200
