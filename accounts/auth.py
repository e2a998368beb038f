"""Token authentication for /api/v2 and the websockets: knox's, recording when each token was
last used (the tokens page shows it, so a forgotten or leaked token stands out), and reading one
row per request.

knox's TokenAuthentication also loads every other token of the user on every request, to delete
the expired ones among them: a second query per request that grows with the user's tokens. Here an
expired token is still refused (and deleted) when it is the one presented; the user's other expired
tokens are swept by the hourly `accounts.tasks.delete_expired_tokens` and whenever they list their
tokens. accounts/tests/test_token_auth.py counts the queries."""

from __future__ import annotations

import binascii
import math
import time
from datetime import timedelta
from hmac import compare_digest
from typing import Any

from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.models import get_token_model
from knox.settings import CONSTANTS, knox_settings
from knox.signals import token_expired
from rest_framework import exceptions

from core.prepared import Prepared

from .models import ApiToken

# The token's row and its user's, read on every API request: its SQL compiled once per process
# (core/prepared.py), not once per request.
_TOKEN = Prepared(lambda key: get_token_model().objects.filter(token_key=key).select_related("user"), str)


class TokenAuthentication(KnoxTokenAuthentication):  # type: ignore[misc]  # knox has no types
    """knox's, and `validate_user` (its hook for a valid token) also records the use."""

    def authenticate_credentials(self, token: bytes) -> tuple[Any, Any]:
        """knox's, without its sweep of the user's other tokens (see the module's docstring)."""
        msg = _("Invalid token.")
        text = token.decode("utf-8")
        for auth_token in _TOKEN.fetch(text[:CONSTANTS.TOKEN_KEY_LENGTH]):
            if auth_token.expiry is not None and auth_token.expiry < timezone.now():
                username = auth_token.user.get_username()
                auth_token.delete()
                token_expired.send(sender=self.__class__, username=username, source="auth_token")
                continue
            try:
                digest = hash_token(text)
            except (TypeError, binascii.Error):
                raise exceptions.AuthenticationFailed(msg) from None
            if compare_digest(digest, auth_token.digest):
                if knox_settings.AUTO_REFRESH and auth_token.expiry:
                    self.renew_token(auth_token)
                return self.validate_user(auth_token)
        raise exceptions.AuthenticationFailed(msg)

    def validate_user(self, auth_token: Any) -> tuple[Any, Any]:
        found: tuple[Any, Any] = super().validate_user(auth_token)  # raises for an inactive user: no use recorded
        token_used(auth_token.pk, auth_token.digest)
        return found


class TokenScheme(KnoxTokenScheme):  # type: ignore[no-untyped-call]  # drf-spectacular's __init_subclass__
    """The schema's security scheme, knox's as drf-spectacular describes it (it matches by class)."""

    target_class = "accounts.auth.TokenAuthentication"


# A token's use is written at most once a LAST_USED_EVERY per process: not a write per request.
LAST_USED_EVERY = timedelta(minutes=1)
_recorded: dict[str, float] = {}  # knox token digest -> monotonic time its use was last written


def token_used(auth_token_pk: int, digest: str) -> None:
    """Record that a request came with this token now (to within LAST_USED_EVERY)."""
    now = time.monotonic()
    if now - _recorded.get(digest, -math.inf) < LAST_USED_EVERY.total_seconds():
        return
    if len(_recorded) > 10_000:  # a long-lived process meets many tokens: forget the old ones
        _recorded.clear()
    _recorded[digest] = now
    moment = timezone.now()
    ApiToken.objects.filter(auth_token_id=auth_token_pk).filter(
        Q(last_used=None) | Q(last_used__lt=moment - LAST_USED_EVERY)).update(last_used=moment)
