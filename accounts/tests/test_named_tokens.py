"""Tokens made on purpose, for a script or a CI job: named, shown once, on the tokens page and in
the API; and each token's last use, so a forgotten or leaked one stands out."""

import pytest
from rest_framework.test import APIClient

from accounts import services
from accounts.models import ApiToken
from tests.support import token_client

pytestmark = pytest.mark.django_db


def api(secret):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_the_api_makes_a_named_token_shown_once(alice):
    you = token_client(alice)
    res = you.post("/api/v2/auth/tokens/", {"name": "ci-nightly", "never_expires": True}, format="json")
    assert res.status_code == 201
    made = res.json()
    assert made["name"] == "ci-nightly" and made["expiry"] is None and len(made["token"]) >= 32
    assert api(made["token"]).get("/api/v2/jobs/").status_code == 200
    listed = {t["name"]: t for t in you.get("/api/v2/auth/tokens/").json()["results"]}
    assert "token" not in listed["ci-nightly"]  # never again
    again = you.post("/api/v2/auth/tokens/", {"name": "ci-nightly"}, format="json")
    assert again.status_code == 400 and "already have a token named 'ci-nightly'" in again.json()["name"][0]
    assert api(made["token"]).get("/api/v2/jobs/").status_code == 200  # making one never revokes another
    assert you.post("/api/v2/auth/tokens/", {"name": "  "}, format="json").status_code == 400


@pytest.mark.parametrize("url", ["/api/v2/auth/tokens/", "/api/v2/auth/token/"])
def test_a_token_name_longer_than_the_schema_allows_is_refused_even_with_spaces_around(alice, url):
    # DRF trims the ends before it counts: 64 characters inside a space were taken (schemathesis)
    name = " " + "n" * 64
    body = {"name": name} if url.endswith("tokens/") else {"name": name, "username": "alice", "password": "password"}
    res = token_client(alice).post(url, body, format="json")
    assert res.status_code == 400 and "no more than 64 characters" in res.json()["name"][0]
    assert not ApiToken.objects.filter(name="n" * 64).exists()


def test_the_tokens_page_makes_a_named_token_and_shows_its_secret_once(client, alice):
    client.force_login(alice)
    res = client.post("/account/tokens/", {"name": "notebook"})
    page = res.content.decode()
    info = ApiToken.objects.get(user=alice, name="notebook")
    secret = page.split('id="new-token-secret" value="')[1].split('"')[0]
    assert api(secret).get("/api/v2/jobs/").status_code == 200
    assert info.auth_token.expiry is not None  # expires unless asked
    assert secret not in client.get("/account/tokens/").content.decode()
    res = client.post("/account/tokens/", {"name": "notebook"})
    assert res.status_code == 400 and "already have a token named" in res.content.decode()


def test_each_tokens_last_use_is_recorded_and_shown(client, alice, monkeypatch):
    unused = services.issue_token(alice, name="spare")
    used = services.issue_token(alice, name="laptop")
    assert api(used).get("/api/v2/jobs/").status_code == 200
    laptop = ApiToken.objects.get(name="laptop")
    assert laptop.last_used is not None and ApiToken.objects.get(name="spare").last_used is None
    first = laptop.last_used
    api(used).get("/api/v2/jobs/")  # within the minute: no second write
    laptop.refresh_from_db()
    assert laptop.last_used == first
    listed = {t["name"]: t for t in api(unused).get("/api/v2/auth/tokens/").json()["results"]}
    assert listed["laptop"]["last_used"] is not None
    client.force_login(alice)
    page = client.get("/account/tokens/").content.decode()
    rows = {row.split("</td>")[0].split("<td>")[-1]: row for row in page.split("<tr>")[2:]}
    assert 'class="last-used"><span title=' in rows["laptop"] and 'class="last-used">never' not in rows["laptop"]
