"""Encrypted fields under FIELD_ENCRYPTION_KEYS: the first key encrypts, all decrypt, and
`manage.py rotate_field_keys` moves every stored secret to the first key."""

import io

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from accounts.models import Datacenter, Registry

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def _stored(model, pk: int, column: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {model._meta.db_table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


@pytest.fixture
def secrets(settings, alice, datacenter):
    """alice's registry password and the datacenter's kubeconfig, written under the OLD key."""
    settings.FIELD_ENCRYPTION_KEYS = [OLD]
    registry = Registry.objects.create(user=alice, name="hub", server="r.example.com", username="a", password="s3cret")
    Datacenter.objects.filter(pk=datacenter.pk).update(kubeconfig="apiVersion: v1")
    return registry, datacenter


def test_rotation_moves_every_secret_to_the_first_key(settings, secrets):
    registry, dc = secrets
    assert Fernet(OLD).decrypt(_stored(Registry, registry.pk, "password").encode()) == b"s3cret"

    settings.FIELD_ENCRYPTION_KEYS = [NEW, OLD]  # the new key first: old secrets still read
    assert Registry.objects.get(pk=registry.pk).password == "s3cret"
    settings.FIELD_ENCRYPTION_KEYS = [NEW]  # without the old key they do not, before the rotation
    with pytest.raises(ValueError, match="FIELD_ENCRYPTION_KEYS"):
        Registry.objects.get(pk=registry.pk)

    settings.FIELD_ENCRYPTION_KEYS = [NEW, OLD]
    out = io.StringIO()
    call_command("rotate_field_keys", stdout=out)
    assert "re-encrypted 2 stored secrets" in out.getvalue()

    settings.FIELD_ENCRYPTION_KEYS = [NEW]  # after it only the new key is needed
    assert Registry.objects.get(pk=registry.pk).password == "s3cret"
    assert Datacenter.objects.get(pk=dc.pk).kubeconfig == "apiVersion: v1"
    assert Fernet(NEW).decrypt(_stored(Registry, registry.pk, "password").encode()) == b"s3cret"
    assert Fernet(NEW).decrypt(_stored(Datacenter, dc.pk, "kubeconfig").encode()) == b"apiVersion: v1"


def test_the_default_key_comes_from_secret_key_and_stays_readable_beside_new_keys(settings, alice):
    from paddleweb.settings import _key_from_secret

    derived = _key_from_secret(settings.SECRET_KEY)
    assert settings.FIELD_ENCRYPTION_KEYS[-1] == derived  # always last, the only key when none is set
    settings.FIELD_ENCRYPTION_KEYS = [derived]  # nothing set: secrets are keyed as before
    registry = Registry.objects.create(user=alice, name="hub", server="r.example.com", username="a", password="pw")
    assert Fernet(derived).decrypt(_stored(Registry, registry.pk, "password").encode()) == b"pw"

    settings.FIELD_ENCRYPTION_KEYS = [NEW, derived]  # what setting FIELD_ENCRYPTION_KEYS=NEW gives
    assert Registry.objects.get(pk=registry.pk).password == "pw"
    Registry.objects.create(user=alice, name="other", server="r.example.com", username="a", password="pw2")
    assert Fernet(NEW).decrypt(_stored(Registry, Registry.objects.get(name="other").pk, "password").encode())


def test_a_malformed_key_is_a_configuration_error(settings, alice):
    from django.core.exceptions import ImproperlyConfigured

    settings.FIELD_ENCRYPTION_KEYS = ["not-a-key"]
    with pytest.raises(ImproperlyConfigured, match=r"FIELD_ENCRYPTION_KEYS\[0\]"):
        Registry.objects.create(user=alice, name="hub", server="r.example.com", username="a", password="pw")
