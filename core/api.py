"""Shared pieces of the /api/v2 views: the owner-only base class and service error mapping."""

from contextlib import contextmanager

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import serializers, viewsets
from rest_framework.exceptions import NotFound
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

    def get_object(self):
        # PostgreSQL refuses a NUL in a text lookup with an error (a 500); no object has one.
        if "\x00" in str(self.kwargs.get(self.lookup_url_kwarg or self.lookup_field, "")):
            raise NotFound()
        return super().get_object()


@csrf_exempt  # it changes nothing; a POST without a CSRF token gets the same 404
def not_found(request, *args, **kwargs):
    """Any URL under /api/v2/ that no route takes (e.g. an id with a '.'): the API's JSON 404
    instead of the site's HTML page."""
    return JsonResponse({"detail": "Not found."}, status=404)
