import pytest
from django.db import connection
from knox.models import AuthToken

from accounts.models import Registry

pytestmark = pytest.mark.django_db


def test_a_token_is_issued_for_a_username_and_password_and_stored_hashed(client, alice):
    res = client.post("/api/v2/auth/token/", {"username": "alice", "password": "password"},
                      content_type="application/json")
    token = res.json()["token"]
    assert res.status_code == 200 and len(token) >= 32
    stored = AuthToken.objects.get(user=alice)
    assert token not in (stored.digest, stored.token_key)  # only a prefix and a hash are kept
    assert client.get("/api/v2/jobs/", headers={"Authorization": f"Token {token}"}).status_code == 200


def test_a_wrong_password_gets_a_clear_error(client, alice):
    res = client.post("/api/v2/auth/token/", {"username": "alice", "password": "nope"},
                      content_type="application/json")
    assert res.status_code == 400 and res.json() == {"non_field_errors": ["wrong username or password"]}


def test_registry_passwords_are_encrypted_at_rest_and_never_returned(alice_api, alice):
    res = alice_api.post("/api/v2/registries/", {"name": "private", "server": "registry.example.com:5000",
                                                  "username": "me", "password": "s3cret-pass"}, format="json")
    assert res.status_code == 201
    assert "password" not in res.json()
    assert "s3cret-pass" not in alice_api.get("/api/v2/registries/").content.decode()
    with connection.cursor() as cur:
        cur.execute("SELECT password FROM accounts_registry")
        raw = cur.fetchone()[0]
    assert "s3cret-pass" not in raw
    assert Registry.objects.get().password == "s3cret-pass"


def test_registry_errors_are_keyed_by_field(alice_api):
    res = alice_api.post("/api/v2/registries/", {"name": "Bad_Name", "server": "has space", "username": "",
                                                  "password": "x"}, format="json")
    assert res.status_code == 400
    assert set(res.json()) >= {"name", "server", "username"}
    alice_api.post("/api/v2/registries/", {"name": "r1", "server": "r.example.com", "username": "u",
                                           "password": "p"}, format="json")
    dup = alice_api.post("/api/v2/registries/", {"name": "r1", "server": "r.example.com", "username": "u",
                                                  "password": "p"}, format="json")
    assert "already have a registry named 'r1'" in dup.json()["name"][0]


def test_registries_are_private_and_deletable(alice_api, bob_api):
    alice_api.post("/api/v2/registries/", {"name": "r1", "server": "r.example.com", "username": "u",
                                           "password": "p"}, format="json")
    assert bob_api.get("/api/v2/registries/").json()["results"] == []
    assert bob_api.delete("/api/v2/registries/r1/").status_code == 404
    assert alice_api.delete("/api/v2/registries/r1/").status_code == 204
    assert not Registry.objects.exists()


def test_bootstrap_creates_the_datacenter_and_a_first_admin(db, capsys):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("bootstrap", password="first-password")
    call_command("bootstrap")  # idempotent
    admin = get_user_model().objects.get()
    assert admin.is_superuser and admin.check_password("first-password")
    assert "username: admin" in capsys.readouterr().out
    from accounts.models import Datacenter
    from pfs.paths import home

    assert Datacenter.objects.get().backend == "local"
    assert (home(admin, "local").child("examples", "fit_a_line").disk / "train.py").exists()
