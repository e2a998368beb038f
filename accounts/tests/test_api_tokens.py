"""API tokens: named per device, expiring by default, listed without their secret, revocable in
/api/v2 and on the "API tokens" page; expired ones are refused and deleted."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def login(client, name=None, **extra):
    body = {"username": "alice", "password": "password", **({"name": name} if name is not None else {}), **extra}
    return client.post("/api/v2/auth/token/", body, content_type="application/json")


def api(token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_a_token_expires_after_the_operators_default_lifetime(client, alice, settings):
    res = login(client, "laptop").json()
    expiry = timezone.datetime.fromisoformat(res["expiry"])
    expected = timezone.now() + timedelta(days=settings.API_TOKEN_TTL_DAYS)
    assert settings.API_TOKEN_TTL_DAYS == 90 and abs(expiry - expected) < timedelta(minutes=1)
    assert res["name"] == "laptop" and res["id"] and len(res["token"]) >= 32


def test_a_token_that_never_expires_is_an_explicit_choice(client, alice):
    res = login(client, "old-cli", never_expires=True).json()
    assert res["expiry"] is None
    assert AuthToken.objects.get(info__id=res["id"]).expiry is None


def test_an_expired_token_is_refused_and_deleted(client, alice, settings):
    settings.REST_KNOX = {**settings.REST_KNOX, "TOKEN_TTL": timedelta(seconds=5)}  # longer than a slow request
    res = login(client, "laptop").json()
    assert api(res["token"]).get("/api/v2/jobs/").status_code == 200
    expiry = timezone.datetime.fromisoformat(res["expiry"])
    while timezone.now() <= expiry:  # the clock passing the token's expiry
        time.sleep(0.05)
    assert api(res["token"]).get("/api/v2/jobs/").status_code == 401
    assert not AuthToken.objects.filter(info__id=res["id"]).exists()


def test_the_sweep_deletes_every_users_expired_tokens(alice, bob):
    services.issue_token(alice, name="a")
    services.issue_token(bob, name="b")
    live = services.issue_token(bob, name="c")
    AuthToken.objects.exclude(info__name="c").update(expiry=timezone.now() - timedelta(seconds=1))
    from accounts.tasks import delete_expired_tokens

    assert delete_expired_tokens() == 2
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["c"]
    assert api(live).get("/api/v2/jobs/").status_code == 200


def test_logging_in_again_from_a_device_replaces_its_token(client, alice):
    first = login(client, "laptop").json()
    second = login(client, "laptop").json()
    other = login(client, "desktop").json()
    assert api(first["token"]).get("/api/v2/jobs/").status_code == 401
    assert api(second["token"]).get("/api/v2/jobs/").status_code == 200
    names = [t["name"] for t in api(other["token"]).get("/api/v2/auth/tokens/").json()["results"]]
    assert sorted(names) == ["desktop", "laptop"]


def test_unnamed_logins_each_get_their_own_token(client, alice):
    first, second = login(client).json(), login(client).json()
    assert first["id"] != second["id"] and first["name"] == second["name"] == ""
    assert api(first["token"]).get("/api/v2/jobs/").status_code == 200


def test_tokens_are_listed_without_their_secret_and_revoked_by_id(client, alice):
    laptop, ci = login(client, "laptop").json(), login(client, "ci").json()
    listing = api(laptop["token"]).get("/api/v2/auth/tokens/")
    assert listing.status_code == 200
    assert laptop["token"] not in listing.content.decode() and ci["token"] not in listing.content.decode()
    rows = {t["name"]: t for t in listing.json()["results"]}
    assert set(rows["laptop"]) == {"id", "name", "created", "expiry", "last_used", "current"}
    assert rows["laptop"]["current"] is True and rows["ci"]["current"] is False
    assert api(laptop["token"]).delete(f"/api/v2/auth/tokens/{ci['id']}/").status_code == 204
    assert api(ci["token"]).get("/api/v2/jobs/").status_code == 401
    assert [t["name"] for t in api(laptop["token"]).get("/api/v2/auth/tokens/").json()["results"]] == ["laptop"]


def test_nobody_sees_or_revokes_another_users_tokens(alice_api, bob_api, alice):
    mine = services.create_token(alice, name="laptop")[0]
    assert [t["name"] for t in bob_api.get("/api/v2/auth/tokens/").json()["results"]] == [""]
    assert bob_api.delete(f"/api/v2/auth/tokens/{mine.id}/").status_code == 404
    assert ApiToken.objects.filter(pk=mine.pk).exists()


def test_bad_token_requests_get_field_errors(client, alice):
    res = login(client, "x" * 65, never_expires="maybe")
    assert res.status_code == 400 and set(res.json()) == {"name", "never_expires"}
    assert not AuthToken.objects.exists()


def test_the_api_tokens_page_lists_and_revokes_tokens(client, alice, bob):
    laptop = services.create_token(alice, name="laptop")[0]
    services.create_token(alice, name="old-cli", never_expires=True)
    bobs = services.create_token(bob, name="bobs-box")[0]
    client.force_login(alice)
    page = client.get("/account/tokens/").content.decode()
    assert 'href="/account/tokens/"' in page  # linked from the navigation
    assert "laptop" in page and "old-cli" in page and "never" in page and "bobs-box" not in page
    assert client.post(f"/account/tokens/{bobs.pk}/revoke/").status_code == 404
    res = client.post(f"/account/tokens/{laptop.pk}/revoke/", follow=True)
    assert "Token laptop revoked" in res.content.decode()
    assert list(ApiToken.objects.filter(user=alice).values_list("name", flat=True)) == ["old-cli"]
    assert ApiToken.objects.filter(pk=bobs.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_logins_at_once_from_one_device_leave_one_working_token(alice):
    import threading

    from django.db import connection

    start, secrets, errors = threading.Barrier(6), [], []

    def log_in():
        try:
            start.wait(30)
            secrets.append(services.issue_token(alice, name="laptop"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            connection.close()

    threads = [threading.Thread(target=log_in) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(secrets) == 6
    assert ApiToken.objects.filter(user=alice, name="laptop").count() == 1 == AuthToken.objects.count()
    working = [s for s in secrets if api(s).get("/api/v2/jobs/").status_code == 200]
    assert len(working) == 1


def test_an_operator_revokes_tokens_in_the_admin(client, alice, bob):
    from django.contrib.auth import get_user_model

    admin_user = get_user_model().objects.create_superuser("root", "root@example.com", "password")
    laptop, secret = services.create_token(alice, name="laptop")
    services.create_token(bob, name="box")
    client.force_login(admin_user)
    listing = client.get("/admin/accounts/apitoken/").content.decode()
    assert "laptop" in listing and "box" in listing and secret not in listing
    client.post(f"/admin/accounts/apitoken/{laptop.pk}/delete/", {"post": "yes"})
    assert api(secret).get("/api/v2/jobs/").status_code == 401
    client.post("/admin/accounts/apitoken/", {"action": "delete_selected", "post": "yes",
                                               "_selected_action": list(ApiToken.objects.values_list("pk", flat=True))})
    assert not AuthToken.objects.exists()
