from django.conf import settings
from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import api_view, permission_classes, throttle_classes
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle

from accounts import services
from accounts.models import Datacenter, Registry
from paddleweb.api import OwnedViewSet, field_errors

from .serializers import DatacenterSerializer, RegistrySerializer, TokenRequestSerializer, TokenSerializer


class RegistryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, OwnedViewSet):
    """Your private docker registries. Passwords are stored encrypted and never returned."""

    queryset = Registry.objects.all()
    serializer_class = RegistrySerializer
    lookup_field = "name"

    def create(self, request):
        data = RegistrySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        with field_errors():
            registry = services.create_registry(request.user, **data.validated_data)
        return Response(RegistrySerializer(registry).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        services.delete_registry(instance)


class DatacenterViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    queryset = Datacenter.objects.all()
    serializer_class = DatacenterSerializer
    pagination_class = None


class LoginThrottle(AnonRateThrottle):
    rate = "30/min"


@extend_schema(request=TokenRequestSerializer, responses={200: TokenSerializer}, auth=[])
@api_view(["POST"])
@permission_classes([AllowAny])
@throttle_classes([LoginThrottle])
def obtain_token(request):
    """Exchange a username and password for an API token (send it as `Authorization: Token <token>`)."""
    data = TokenRequestSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    user = authenticate(request, **data.validated_data)
    if user is None:
        raise serializers.ValidationError({"non_field_errors": ["wrong username or password"]})
    return Response({"token": services.issue_token(user)})


@extend_schema(responses={200: {"type": "object", "properties": {"version": {"type": "string"}}}})
@api_view(["GET"])
@permission_classes([AllowAny])
def version(request):
    return Response({"version": settings.PADDLECLOUD_VERSION})
