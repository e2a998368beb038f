"""API tokens and registries."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from knox.models import AuthToken

from .models import ApiToken, Registry, dns_label

if TYPE_CHECKING:
    from django.contrib.auth.models import User

TOKEN_NAME_MAX: int = ApiToken._meta.get_field("name").max_length or 0


def create_token(user: User, *, name: str = "", never_expires: bool = False,
                 ttl: timedelta | None = None) -> tuple[ApiToken, str]:
    """A new API token for `user` and the one time its secret is seen (knox stores a hash).
    It expires after `ttl`, else the operator's API_TOKEN_TTL_DAYS, unless `never_expires` (an
    explicit choice, for legacy clients). A named device holds one token: its old one is revoked."""
    name = " ".join(str(name).split())
    if len(name) > TOKEN_NAME_MAX:
        raise ValidationError({"name": [f"at most {TOKEN_NAME_MAX} characters"]})
    expiry = {"expiry": None} if never_expires else {"expiry": ttl} if ttl is not None else {}
    with transaction.atomic():
        # Logins of one user queue here, so two at once from one device leave one token.
        get_user_model().objects.select_for_update().get(pk=user.pk)
        if name:
            AuthToken.objects.filter(user=user, info__name=name).delete()
        auth_token, secret = AuthToken.objects.create(user=user, **expiry)
        return ApiToken.objects.create(auth_token=auth_token, user=user, name=name), secret


def issue_token(user: User, *, name: str = "", never_expires: bool = False) -> str:
    """create_token's secret alone."""
    return create_token(user, name=name, never_expires=never_expires)[1]


def delete_expired_tokens(user: User | None = None) -> int:
    """Delete expired tokens (of `user`, or everyone's); knox already refuses them."""
    expired = AuthToken.objects.filter(expiry__lt=timezone.now())
    if user is not None:
        expired = expired.filter(user=user)
    deleted: int = expired.delete()[1].get(AuthToken._meta.label, 0)
    return deleted


def tokens_of(user: User) -> QuerySet[ApiToken]:
    """A user's live tokens, newest first."""
    return (ApiToken.objects.filter(user=user).select_related("auth_token")
            .filter(Q(auth_token__expiry__isnull=True) | Q(auth_token__expiry__gte=timezone.now())))


def create_named_token(user: User, *, name: str, never_expires: bool = False) -> tuple[ApiToken, str]:
    """A token made on purpose (the tokens page, POST auth/tokens/): it must have a name, one not in
    use, so that making it never revokes another (a login from a device does replace that device's)."""
    name = " ".join(str(name).split())
    if not name:
        raise ValidationError({"name": ["give the token a name, e.g. what it is for"]})
    if tokens_of(user).filter(name=name).exists():
        raise ValidationError({"name": [f"you already have a token named '{name}': revoke it or pick another name"]})
    return create_token(user, name=name, never_expires=never_expires)


def revoke_token(token: ApiToken) -> None:
    token.auth_token.delete()  # the ApiToken goes with it


def revoke_tokens(tokens: QuerySet[ApiToken]) -> None:
    AuthToken.objects.filter(info__in=tokens).delete()


class TokenHeader:
    """What knox's TokenAuthentication reads of a request: the Authorization header. For
    requests that never become a Django request (streamed upload chunks, websockets)."""

    def __init__(self, authorization: str):
        self.headers = {"authorization": authorization}
        self.META = {"HTTP_AUTHORIZATION": authorization}


def user_for_token(authorization: str) -> User | None:
    """The user an `Authorization: Token <key>` header stands for (knox's checks: the hashed
    key, expiry, inactive users), or None."""
    from rest_framework.exceptions import AuthenticationFailed

    from .auth import TokenAuthentication

    try:
        found = TokenAuthentication().authenticate(TokenHeader(authorization))
    except AuthenticationFailed:
        return None
    return found[0] if found else None


REGISTRY_SERVER_FORM = "a host name with an optional port, like registry.example.com:5000"


def valid_registry_server(server: str) -> bool:
    """Whether `server` can go into a docker config as it is (a scheme and a trailing slash pass)."""
    return not any(c.isspace() or c == "/" for c in server.rstrip("/").split("://", 1)[-1])


def create_registry(user: User, *, name: str, server: str, username: str, password: str) -> Registry:
    errors: dict[str, list[str]] = {}
    try:
        dns_label(name)
    except ValidationError as e:
        errors["name"] = e.messages
    for field, value in (("server", server), ("username", username), ("password", password)):
        if not value or not str(value).strip():
            errors[field] = ["this field is required"]
    if server and not valid_registry_server(server):
        errors["server"] = [REGISTRY_SERVER_FORM]
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
