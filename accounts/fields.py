"""A text field encrypted at rest with Fernet (from `cryptography`).

The key comes from FIELD_ENCRYPTION_KEY when set, else it is derived from SECRET_KEY, so a
laptop install needs no extra setup while production can rotate SECRET_KEY separately.
"""

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import models


@functools.cache
def _fernet() -> Fernet:
    key = getattr(settings, "FIELD_ENCRYPTION_KEY", "")
    if not key:
        raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"paddlecloud-fields").derive(
            settings.SECRET_KEY.encode()
        )
        key = base64.urlsafe_b64encode(raw)
    return Fernet(key)


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as e:
        raise ValueError("cannot decrypt a stored secret: was the encryption key changed?") from e


class EncryptedTextField(models.TextField):
    """Stores ciphertext; Python code only ever sees the plain value."""

    def from_db_value(self, value, expression, connection):
        return value if value in (None, "") else decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return value if value in (None, "") else encrypt(value)
