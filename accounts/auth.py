"""Token authentication for /api/v2 and the websockets: knox's, recording when each token was
last used (the tokens page shows it, so a forgotten or leaked token stands out)."""

from __future__ import annotations

import math
import time
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication

from .models import ApiToken


class TokenAuthentication(KnoxTokenAuthentication):
    """knox's, and `validate_user` (its hook for a valid token) also records the use."""

    def validate_user(self, auth_token: Any) -> tuple[Any, Any]:
        found = super().validate_user(auth_token)  # raises for an inactive user: no use recorded
        token_used(auth_token.pk, auth_token.digest)
        return found


class TokenScheme(KnoxTokenScheme):
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
