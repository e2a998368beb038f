"""The submit serializer, derived from the job spec: the API's request body (and so the OpenAPI
schema), and the type and bounds check of every submission (jobs.submission.validation runs its fields one
by one, so the API, the form and /api/v1 get the same messages)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework import serializers

from .. import spec

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise

_INT_MESSAGES: dict[str, str | StrPromise] = {
    "invalid": "must be a whole number", "max_string_length": "must be a whole number",
    "null": "must be a whole number", "min_value": "must be at least {min_value}",
    "max_value": "must be at most {max_value}"}


def _text_messages(f: spec.Field) -> dict[str, str | StrPromise]:
    what = (f.label or f.name).lower()
    return {"required": f"the {what} is required", "blank": f"the {what} is required",
            "null": f"the {what} is required", "invalid": "must be text",
            "max_length": f"at most {f.max_length} characters"}


def serializer_field(f: spec.Field, *, change: bool = False) -> serializers.Field[Any, Any, Any, Any]:
    """The DRF field of a spec field, with its default, bounds and help text; with `change`, an
    optional field without a default (a change to an existing job's value)."""
    common: dict[str, Any] = {"help_text": f.help}
    if change:
        common["required"] = False
    elif not f.required:
        common["default"] = spec.defaults()[f.name]
    if f.kind == "int":
        return serializers.IntegerField(min_value=f.min, max_value=f.max, allow_null=f.nullable,
                                        error_messages=_INT_MESSAGES, **common)
    if f.kind == "bool":
        return serializers.BooleanField(error_messages={"invalid": "must be true or false"}, **common)
    if f.kind == "env":
        child = serializers.CharField(allow_blank=True, trim_whitespace=False,
                                      error_messages={"invalid": "must be text", "null": "must be text"})
        return serializers.DictField(child=child, error_messages={"not_a_dict": "must be a mapping of NAME to value"},
                                     **common)
    if f.kind == "choice":
        choices = " or ".join(f"'{c}'" for c, _ in f.choices)
        return serializers.ChoiceField(choices=f.choices, error_messages={"invalid_choice": f"must be {choices}"},
                                       **common)
    messages = _text_messages(f)
    if f.kind == "name":
        messages["invalid"] = f"Use {spec.NAME_RULE}."
        return serializers.RegexField(spec.NAME_PATTERN, max_length=f.max_length, error_messages=messages,
                                      **common)
    return serializers.CharField(max_length=f.max_length, allow_blank=not f.required, error_messages=messages,
                                 **common)


JobSubmitSerializer = type("JobSubmitSerializer", (serializers.Serializer,), {
    "__doc__": "A job to submit: only name, package and entry are required (see jobs/spec.py).",
    **{f.name: serializer_field(f) for f in spec.surface("api")},
})

JobCloneSerializer = type("JobCloneSerializer", (serializers.Serializer,), {
    "__doc__": "Changes to the cloned job's fields; every field not given keeps the source job's value, and the "
               "name defaults to a free one made from the source's (<name>-2).",
    **{f.name: serializer_field(f, change=True) for f in spec.surface("api")},
})
