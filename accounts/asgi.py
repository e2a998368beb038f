"""Authentication for ASGI traffic that never becomes a Django request: websockets, and the
upload chunks pfs.asgi_fast streams to disk."""

from __future__ import annotations

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import AllowedHostsOriginValidator
from django.contrib.auth.models import AnonymousUser

from .services import user_for_token


def header(scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def is_token(authorization: str) -> bool:
    """Whether an Authorization header carries an API token (`Token <key>`)."""
    from knox.settings import knox_settings

    parts = authorization.split()
    return bool(parts) and parts[0].lower() == knox_settings.AUTH_HEADER_PREFIX.lower()


class TokenOrSessionAuth:
    """Websocket auth. A client sending `Authorization: Token <key>` (paddlectl) is that token's
    user, whatever its Origin: a token is not an ambient credential another site's page could
    ride on. Everyone else is the browser session's user, with the Origin checked."""

    def __init__(self, inner):
        self.inner = inner
        self.browser = AllowedHostsOriginValidator(AuthMiddlewareStack(inner))

    async def __call__(self, scope, receive, send):
        authorization = header(scope, b"authorization")
        if authorization is None or not is_token(authorization):
            return await self.browser(scope, receive, send)
        user = await database_sync_to_async(user_for_token)(authorization)
        return await self.inner({**scope, "user": user or AnonymousUser()}, receive, send)
