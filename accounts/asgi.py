"""Authentication for ASGI traffic that never becomes a Django request: websockets, and the
upload chunks pfs.asgi_fast streams to disk."""

from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from core.asgi_types import ASGIApp, Receive, Scope, Send
from core.headers import header

from .services import user_for_token


def is_token(authorization: str) -> bool:
    """Whether an Authorization header carries an API token (`Token <key>`)."""
    from knox.settings import knox_settings

    parts = authorization.split()
    return bool(parts) and parts[0].lower() == knox_settings.AUTH_HEADER_PREFIX.lower()


def credentials_valid(authorization: str | None, session_key: str | None) -> bool:
    """Whether a request's credentials name an active user (the checks Django and knox make):
    core.body_limits asks before it lets a body in."""
    if authorization is not None and is_token(authorization):
        return user_for_token(authorization) is not None
    if session_key:
        from django.contrib import auth

        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        # get_user reads only the request's session
        return auth.get_user(SimpleNamespace(session=store)).is_authenticated  # type: ignore[arg-type]
    return False


class TokenOrSessionAuth:
    """Websocket auth. A client sending `Authorization: Token <key>` (paddlectl) is that token's
    user, whatever its Origin: a token is not an ambient credential another site's page could
    ride on. Everyone else is the browser session's user, with the Origin checked."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner
        self.browser = AllowedHostsOriginValidator(AuthMiddlewareStack(inner))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        authorization = header(scope, b"authorization")
        if authorization is None or not is_token(authorization):
            await self.browser(scope, receive, send)
            return
        user = await database_sync_to_async(user_for_token)(authorization)
        return await self.inner({**scope, "user": user or AnonymousUser()}, receive, send)
