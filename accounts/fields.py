"""A text field encrypted at rest with Fernet (from `cryptography`).

The keys are settings.FIELD_ENCRYPTION_KEYS (see paddleweb/settings.py): the first encrypts,
every one decrypts, the key derived from SECRET_KEY last, so a laptop install needs no extra
setup and production can rotate keys (`manage.py rotate_field_keys`) apart from SECRET_KEY.
"""

from __future__ import annotations

import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import models, transaction
from django.dispatch import receiver


@functools.cache
def _fernet() -> MultiFernet:
    keys = []
    for i, key in enumerate(settings.FIELD_ENCRYPTION_KEYS):
        try:
            keys.append(Fernet(key))
        except ValueError as e:
            raise ImproperlyConfigured(f"FIELD_ENCRYPTION_KEYS[{i}] is not a Fernet key: {e}") from None
    return MultiFernet(keys)


@receiver(setting_changed)
def _keys_changed(setting: str, **kwargs: object) -> None:
    if setting == "FIELD_ENCRYPTION_KEYS":
        _fernet.cache_clear()


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as e:
        raise ValueError("cannot decrypt a stored secret: was its key removed from FIELD_ENCRYPTION_KEYS?") from e


class EncryptedTextField(models.TextField[str, str]):
    """Stores ciphertext; Python code only ever sees the plain value."""

    def from_db_value(self, value: str | None, expression: object, connection: object) -> str | None:
        return value if value in (None, "") else decrypt(value)

    def get_prep_value(self, value: str | None) -> str | None:
        value = super().get_prep_value(value)
        return value if value in (None, "") else encrypt(value)


def rotate_encrypted_fields() -> int:
    """Re-encrypt every stored secret (every EncryptedTextField of every model) with the first
    of FIELD_ENCRYPTION_KEYS; returns how many values were rewritten. Afterwards the other keys
    are no longer needed. Each model's rows are rewritten in one transaction, locked against a
    concurrent change."""
    rewritten = 0
    for model in apps.get_models():
        names = [f.name for f in model._meta.concrete_fields if isinstance(f, EncryptedTextField)]
        if not names:
            continue
        with transaction.atomic():
            for obj in model._default_manager.select_for_update().only("pk", *names).iterator():
                # Decrypted on load, encrypted with the first key on the way back (no save(): no
                # signals, no auto_now fields touched).
                values = {name: getattr(obj, name) for name in names if getattr(obj, name)}
                if values:
                    model._default_manager.filter(pk=obj.pk).update(**values)
                    rewritten += len(values)
    return rewritten
