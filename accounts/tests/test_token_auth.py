"""Token authentication reads one row per request, whatever the number of tokens the user holds,
and still refuses (and deletes) an expired token. (The token's last use is written at most once a
minute: the first request of each test writes it, the one counted does not.)"""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from knox.models import AuthToken

from accounts.services import user_for_token

pytestmark = pytest.mark.django_db


def test_a_token_request_reads_only_the_presented_token(alice):
    for _ in range(5):
        AuthToken.objects.create(user=alice, expiry=timedelta(seconds=-1))  # expired ones, not presented
    _, secret = AuthToken.objects.create(user=alice)
    assert user_for_token(f"Token {secret}") == alice  # records its use
    with CaptureQueriesContext(connection) as captured:
        assert user_for_token(f"Token {secret}") == alice
    assert len(captured) == 1, [q["sql"] for q in captured.captured_queries]


def test_an_expired_token_is_refused_and_deleted(alice):
    _, secret = AuthToken.objects.create(user=alice, expiry=timedelta(seconds=-1))
    assert user_for_token(f"Token {secret}") is None
    assert not AuthToken.objects.filter(user=alice).exists()


def test_an_api_request_with_a_token_takes_one_query_to_authenticate(alice, alice_api):
    assert alice_api.get("/api/v2/version/").status_code == 200  # records the token's use
    with CaptureQueriesContext(connection) as captured:
        assert alice_api.get("/api/v2/version/").status_code == 200
    assert len(captured) == 1
