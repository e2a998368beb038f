from django.conf import settings
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import services, throttle
from accounts.current import signed_in
from accounts.models import ApiToken, Datacenter, Registry
from core.api import OwnedViewSet, field_errors

from .serializers import (
    ApiTokenSerializer,
    DatacenterSerializer,
    NewTokenSerializer,
    RegistrySerializer,
    TokenRequestSerializer,
    TokenSerializer,
)


class RegistryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                       OwnedViewSet[Registry]):
    """Your private docker registries. Passwords are stored encrypted and never returned."""

    queryset = Registry.objects.all()
    serializer_class = RegistrySerializer
    lookup_field = "name"

    def create(self, request: Request) -> Response:
        data = RegistrySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        with field_errors():
            registry = services.create_registry(signed_in(request), **data.validated_data)
        return Response(RegistrySerializer(registry).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Registry) -> None:
        services.delete_registry(instance)


class DatacenterViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[Datacenter]):
    queryset = Datacenter.objects.all()
    serializer_class = DatacenterSerializer
    pagination_class = None


@extend_schema(request=TokenRequestSerializer, auth=[], responses={
    200: TokenSerializer, 400: OpenApiResponse(description="wrong username or password, or invalid fields"),
    429: OpenApiResponse(description="too many failed logins from this address, or for this account recently: "
                                     "try again after `Retry-After` seconds")})
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def obtain_token(request: Request) -> Response:
    """Exchange a username and password for an API token (send it as `Authorization: Token <token>`).
    It expires after the server's default lifetime unless `never_expires`; logging in again with
    the same `name` (e.g. the device's) replaces that token."""
    data = TokenRequestSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    fields = data.validated_data
    try:
        with field_errors():
            user = throttle.token_login(request, fields["username"], fields["password"])
            info, secret = services.create_token(user, name=fields["name"], never_expires=fields["never_expires"])
    except throttle.LoginThrottled as e:
        raise exceptions.Throttled(wait=e.retry_after, detail=str(e)) from None
    return Response({"token": secret, **ApiTokenSerializer(info, context={"request": request}).data})


class TokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, OwnedViewSet[ApiToken]):
    """Your API tokens: when each was made, last used and expires, never its secret. Deleting one revokes it."""

    queryset = ApiToken.objects.all()
    serializer_class = ApiTokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        user = signed_in(self.request)
        services.delete_expired_tokens(user)
        return services.tokens_of(user)

    def perform_destroy(self, instance: ApiToken) -> None:
        services.revoke_token(instance)

    @extend_schema(request=NewTokenSerializer, responses={201: TokenSerializer})
    def create(self, request: Request) -> Response:
        """Make a named token (for a script, a CI job): its secret is in this answer and never again."""
        data = NewTokenSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        with field_errors():
            info, secret = services.create_named_token(signed_in(request), **data.validated_data)
        return Response({"token": secret, **ApiTokenSerializer(info, context={"request": request}).data},
                        status=status.HTTP_201_CREATED)


@extend_schema(responses={200: {"type": "object", "properties": {"version": {"type": "string"}}}})
@api_view(["GET"])
@permission_classes([AllowAny])
def version(request: Request) -> Response:
    return Response({"version": settings.PADDLECLOUD_VERSION})
