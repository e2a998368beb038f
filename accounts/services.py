"""API tokens and registries."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from knox.models import AuthToken

from .models import Registry, dns_label


def issue_token(user) -> str:
    """A new API token for `user`; only its hash is stored, so this is the one time it is seen."""
    _, token = AuthToken.objects.create(user=user, expiry=None)
    return token


class TokenHeader:
    """What knox's TokenAuthentication reads of a request: the Authorization header. For
    requests that never become a Django request (streamed upload chunks, websockets)."""

    def __init__(self, authorization: str):
        self.headers = {"authorization": authorization}
        self.META = {"HTTP_AUTHORIZATION": authorization}


def user_for_token(authorization: str):
    """The user an `Authorization: Token <key>` header stands for (knox's checks: the hashed
    key, expiry, inactive users), or None."""
    from knox.auth import TokenAuthentication
    from rest_framework.exceptions import AuthenticationFailed

    try:
        found = TokenAuthentication().authenticate(TokenHeader(authorization))
    except AuthenticationFailed:
        return None
    return found[0] if found else None


def create_registry(user, *, name: str, server: str, username: str, password: str) -> Registry:
    errors = {}
    try:
        dns_label(name)
    except ValidationError as e:
        errors["name"] = e.messages
    for field, value in (("server", server), ("username", username), ("password", password)):
        if not value or not str(value).strip():
            errors[field] = ["this field is required"]
    if server and any(c.isspace() or c == "/" for c in server.rstrip("/").split("://", 1)[-1]):
        errors["server"] = ["a host name with an optional port, like registry.example.com:5000"]
    if errors:
        raise ValidationError(errors)
    try:
        with transaction.atomic():
            return Registry.objects.create(user=user, name=name, server=server.strip(), username=username.strip(),
                                           password=password)
    except IntegrityError:
        raise ValidationError({"name": [f"you already have a registry named '{name}'"]}) from None


def delete_registry(registry: Registry) -> None:
    registry.delete()
