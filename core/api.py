"""Shared pieces of the /api/v2 views: the owner-only base class and service error mapping."""

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import ISO_8601, serializers, viewsets
from rest_framework import fields as drf_fields
from rest_framework.exceptions import NotFound
from rest_framework.relations import PKOnlyObject
from rest_framework.settings import api_settings


@contextmanager
def field_errors() -> Iterator[None]:
    """Turn a service's ValidationError({field: [...]}) into DRF's 400 with the same fields."""
    try:
        yield
    except DjangoValidationError as e:
        detail = e.message_dict if hasattr(e, "error_dict") else {api_settings.NON_FIELD_ERRORS_KEY: e.messages}
        if "__all__" in detail:
            detail[api_settings.NON_FIELD_ERRORS_KEY] = detail.pop("__all__")
        raise serializers.ValidationError(detail) from e


_M = TypeVar("_M", bound=Model)


class OwnedViewSet(viewsets.GenericViewSet[_M]):
    """Per-object permission in one place: a user only ever sees their own objects (404 else)."""

    owner_field = "user"

    def get_queryset(self) -> QuerySet[_M]:
        return super().get_queryset().filter(**{self.owner_field: self.request.user})

    def get_object(self) -> _M:
        # PostgreSQL refuses a NUL in a text lookup with an error (a 500); no object has one.
        if "\x00" in str(self.kwargs.get(self.lookup_url_kwarg or self.lookup_field, "")):
            raise NotFound()
        return super().get_object()


@csrf_exempt  # it changes nothing; a POST without a CSRF token gets the same 404
def not_found(request: HttpRequest, *args: object, **kwargs: object) -> JsonResponse:
    """Any URL under /api/v2/ that no route takes (e.g. an id with a '.'): the API's JSON 404
    instead of the site's HTML page."""
    return JsonResponse({"detail": "Not found."}, status=404)


def _related_text_reader(field: drf_fields.Field[Any, Any, Any, Any]) -> Callable[[Any], Any] | None:
    """For a read-only CharField whose source goes through related objects (`datacenter.name`):
    what DRF gives, a missing object (a null foreign key) included (its default, else null, else
    no key at all)."""
    if not field.read_only or (field.default is not drf_fields.empty and callable(field.default)):
        return None
    attrs = field.source_attrs
    missing = field.default if field.default is not drf_fields.empty else None
    skip = field.default is drf_fields.empty and not field.allow_null

    def read(obj: Any) -> Any:
        try:
            for attr in attrs:
                obj = getattr(obj, attr)
        except ObjectDoesNotExist:
            return None
        except AttributeError:
            if skip:
                raise drf_fields.SkipField() from None
            obj = missing
        return None if obj is None else str(obj)

    return read


def _datetime_reader(field: Any, attr: str) -> Callable[[Any], Any]:
    """DRF's ISO 8601 text of a stored aware datetime, in the field's time zone (the active one, as
    DRF reads it, looked up once per serializer instance instead of once per row and field)."""
    drf = field.to_representation
    fmt = getattr(field, "format", api_settings.DATETIME_FORMAT)
    zone = field.timezone if hasattr(field, "timezone") else field.default_timezone()
    if fmt is None or fmt.lower() != ISO_8601 or zone is None:
        return lambda obj: None if (v := getattr(obj, attr)) is None else drf(v)

    def read(obj: Any) -> Any:
        value = getattr(obj, attr)
        if value is None:
            return None
        if type(value) is not datetime or value.utcoffset() is None:  # naive, a str...: DRF's way
            return drf(value)
        try:
            text = value.astimezone(zone).isoformat()
        except OverflowError:
            return drf(value)  # DRF's error
        return text[:-6] + "Z" if text.endswith("+00:00") else text

    return read


def _plain_reader(field: drf_fields.Field[Any, Any, Any, Any]) -> Callable[[Any], Any] | None:
    """A function giving what DRF's `field` would give for an instance, for the fields whose value
    is the stored attribute (a model column of its own), or a related object's text: None for the
    others."""
    if field.source == "*" or not field.source_attrs:
        return None
    if len(field.source_attrs) > 1:
        return _related_text_reader(field) if type(field) is serializers.CharField else None
    attr, kind = field.source_attrs[0], type(field)
    if kind is serializers.CharField:
        return lambda obj: None if (v := getattr(obj, attr)) is None else str(v)
    if kind is serializers.IntegerField:
        return lambda obj: None if (v := getattr(obj, attr)) is None else int(v)
    if kind is serializers.DateTimeField:
        return _datetime_reader(field, attr)
    if kind is serializers.BooleanField:  # a stored bool is itself in DRF's TRUE_VALUES or FALSE_VALUES
        return lambda obj: v if type(v := getattr(obj, attr)) is bool else (
            None if v is None else field.to_representation(v))
    if kind is serializers.ChoiceField:
        choices = field.choice_strings_to_values  # type: ignore[attr-defined]
        return lambda obj: v if (v := getattr(obj, attr)) in ("", None) else choices.get(str(v), v)
    if kind in (serializers.JSONField, serializers.ReadOnlyField) and not getattr(field, "binary", False):
        return lambda obj: getattr(obj, attr)
    return None


def _shallow_copy(field: drf_fields.Field) -> drf_fields.Field:  # type: ignore[type-arg]
    """copy.copy(field), without its trip through __reduce_ex__ (77 fields per job detail)."""
    new = object.__new__(type(field))
    new.__dict__.update(field.__dict__)
    return new


# The plain readers of each serializer class, per time zone (the dates' readers keep the zone that
# was active): worked out for every request before, a sixth of a job list's serialization.
_READERS: dict[tuple[type, Any], dict[str, Callable[[Any], Any] | None]] = {}


def _readers(cls: type, fields: list[drf_fields.Field[Any, Any, Any, Any]]) -> dict[str, Callable[[Any], Any] | None]:
    key = (cls, timezone.get_current_timezone())
    readers = _READERS.get(key)
    if readers is None:
        if len(_READERS) > 1000:  # a zone per user at most; forget the old ones
            _READERS.clear()
        readers = _READERS[key] = {f.field_name: _plain_reader(_detached(f)) for f in fields}  # type: ignore[misc]
    return readers


def _detached(field: drf_fields.Field) -> drf_fields.Field:  # type: ignore[type-arg]
    """A copy of a bound field without its parent: a reader kept across requests keeps neither
    the serializer nor the instances it served."""
    new = _shallow_copy(field)
    new.parent = None  # type: ignore[assignment]  # what an unbound field has (DRF's stubs say a serializer)
    return new


class PlainFieldsRepresentation:
    """For a ModelSerializer: the same representation as DRF's, with the plain fields (text,
    numbers, booleans, choices, JSON, dates, related objects' names) read straight off the
    instance, and every other field through DRF as before. DRF calls get_attribute and
    to_representation through several layers for every field of every row: a page of 50 jobs was
    2,000 such calls, most of the list's time in Python (bench/web.py). The readers are made once
    per class and time zone, the reading plan once per serializer instance (a list's child serves
    every row). jobs/tests/test_api_representation.py checks that both give the same.

    The fields themselves are built from the model once per class, not per request: ModelSerializer
    introspects the model for every field of every serializer instance (three per job detail), 1.5 ms
    of a job detail's CPU. Each instance gets its own copies of the built fields to bind, as DRF's
    own (a nested serializer a deep copy, so its child binds to it)."""

    def get_fields(self) -> dict[str, Any]:
        cls = type(self)
        built: dict[str, Any] | None = cls.__dict__.get("_built_fields")
        if built is None:  # per class (not inherited): a subclass declares fields of its own
            built = super().get_fields()  # type: ignore[misc]
            cls._built_fields = built  # type: ignore[attr-defined]
        return {name: copy.deepcopy(field) if isinstance(field, serializers.BaseSerializer) else _shallow_copy(field)
                for name, field in built.items()}

    def to_representation(self, instance: Any) -> dict[str, Any]:
        plan = self.__dict__.get("_plain_plan")
        if plan is None:
            fields = list(self._readable_fields)  # type: ignore[attr-defined]
            readers = _readers(type(self), fields)
            plan = self._plain_plan = [(f.field_name, readers.get(f.field_name), f) for f in fields]
        ret: dict[str, Any] = {}
        for name, read, field in plan:
            if read is not None:
                try:  # noqa: SIM105 - per field of every row: no context manager object each time
                    ret[name] = read(instance)
                except drf_fields.SkipField:
                    pass
                continue
            try:
                attribute = field.get_attribute(instance)
            except drf_fields.SkipField:
                continue
            check_for_none = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
            ret[name] = None if check_for_none is None else field.to_representation(attribute)
        return ret
