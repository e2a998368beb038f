"""Shared pieces of the /api/v2 views: the owner-only base class and service error mapping."""

from contextlib import contextmanager

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers, viewsets
from rest_framework.settings import api_settings


@contextmanager
def field_errors():
    """Turn a service's ValidationError({field: [...]}) into DRF's 400 with the same fields."""
    try:
        yield
    except DjangoValidationError as e:
        detail = e.message_dict if hasattr(e, "error_dict") else {api_settings.NON_FIELD_ERRORS_KEY: e.messages}
        if "__all__" in detail:
            detail[api_settings.NON_FIELD_ERRORS_KEY] = detail.pop("__all__")
        raise serializers.ValidationError(detail) from e


class OwnedViewSet(viewsets.GenericViewSet):
    """Per-object permission in one place: a user only ever sees their own objects (404 else)."""

    owner_field = "user"

    def get_queryset(self):
        return super().get_queryset().filter(**{self.owner_field: self.request.user})
