from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypedDict, cast

from django import forms
from django.conf import settings

from accounts.models import Datacenter, Registry
from jobs.models import Job

from . import spec
from .live.logstore import MAX_LOG_LINES
from .services import source_spec

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        kwargs.setdefault("allow_empty_file", True)  # packages have empty __init__.py files
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        files = data if isinstance(data, (list, tuple)) else [data] if data else []
        return [super(MultipleFileField, self).clean(f, initial) for f in files]


class _Common(TypedDict, total=False):
    """What every form field of a spec field gets."""

    required: bool
    help_text: str
    initial: Any
    label: str


_INT_MESSAGES = {"invalid": "must be a whole number", "min_value": "must be at least %(limit_value)s",
                 "max_value": "must be at most %(limit_value)s"}


def form_field(f: spec.Field) -> forms.Field:
    """The page's field of a spec field: the spec's default as initial, its bounds and help text."""
    initial = None if f.required else spec.defaults()[f.name]
    # The package is required only when it is already in storage (see JobForm.clean).
    common: _Common = {"required": f.required and f.name != "package", "help_text": f.help, "initial": initial}
    if f.label:
        common["label"] = f.label
    if f.kind == "int":
        field = forms.IntegerField(min_value=f.min, max_value=f.max, error_messages=_INT_MESSAGES, **common)
        if f.mode_defaults:  # the page switches the value with the mode while it is still a default
            modes = {mode: f.default_for(mode) for mode, _ in spec.MODES}
            field.widget.attrs["data-mode-defaults"] = json.dumps(modes)
        return field
    if f.kind == "bool":
        flag: _Common = {**common, "required": False}
        return forms.BooleanField(**flag)
    if f.kind in ("choice", "ref"):  # a ref's choices are the user's objects, filled in per form
        return forms.ChoiceField(choices=f.choices, **common)
    if f.kind == "env":
        lines: _Common = {**common, "initial": "", "help_text": f"{f.help} Here: one NAME=value per line."}
        return forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), **lines)
    return forms.CharField(max_length=f.max_length, **common)


if TYPE_CHECKING:  # made at run time from the spec: to mypy, a Form
    SpecForm = forms.Form
else:
    SpecForm = type("SpecForm", (forms.Form,), {f.name: form_field(f) for f in spec.surface("form")})


class JobForm(SpecForm):
    """The spec's form fields (jobs/spec.py) and where the package comes from; the rules live in
    jobs.submission.validation, shared with the APIs."""

    source = forms.ChoiceField(
        choices=[("upload", "Upload it now"), ("pfs", "Already in my storage")], initial="upload",
        widget=forms.RadioSelect, help_text="Where the training package comes from.")
    # A declared field: the form's metaclass takes it out of the class (form.files stays the uploads).
    files = MultipleFileField(  # type: ignore[assignment]
        required=False, help_text="The package's files, or one .zip / .tar.gz of it. Stored in your home under "
                                  "jobs/<name>/.")

    def __init__(self, *args: Any, user: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        datacenters = list(Datacenter.objects.all())
        cast(forms.ChoiceField, self.fields["datacenter"]).choices = [(d.name, d.name) for d in datacenters]
        # What the page needs to show only the fields the chosen datacenter's backend uses.
        self.datacenter_backends = {d.name: d.backend for d in datacenters}
        self.backend_fields = {f.name: list(f.backends) for f in spec.surface("form") if f.backends}
        self.fields["datacenter"].initial = settings.DEFAULT_DATACENTER
        self.fields["entry"].widget.attrs["placeholder"] = "python train.py"
        # A name over the limit is refused with a message, never cut short as it is typed.
        self.fields["name"].widget.attrs.pop("maxlength", None)
        cast(forms.ChoiceField, self.fields["registry"]).choices = [("", "—")] + [
            (r.name, f"{r.name} ({r.server})") for r in Registry.objects.filter(user=user)]

    @classmethod
    def initial_from(cls, job: Job, name: str) -> dict[str, Any]:
        """The form's values for submitting `job` again ("Edit and resubmit") as `name`: its
        spec, and its package as already in storage."""
        data = {**source_spec(job), "name": name, "source": "pfs"}
        data["env"] = "\n".join(f"{k}={v}" for k, v in data["env"].items())
        return data

    def fieldsets(self) -> list[tuple[str, list[forms.BoundField]]]:
        """The page's sections (spec.GROUPS) with their fields in the spec's order; where the
        package comes from opens the Package section."""
        sections: dict[str, list[forms.BoundField]] = {group: [] for group in spec.GROUPS}
        sections["Package"] += [self["source"], self["files"]]
        for f in spec.surface("form"):
            sections[f.group].append(self[f.name])
        return list(sections.items())

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        errors: list[str] = []
        for n, line in enumerate(self.cleaned_data["env"].splitlines(), 1):
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep:
                errors.append(f"line {n}: write NAME=value")
            env[key.strip()] = value.strip()
        if errors:  # all of them at once
            raise forms.ValidationError(errors)
        return env

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        if data.get("source") == "pfs" and not data.get("package"):
            self.add_error("package", "give the package's directory in your storage")
        if data.get("source") == "upload" and not data.get("files"):
            self.add_error("files", "choose the package's files, or one .zip or .tar.gz")
        return data


class LogLinesForm(forms.Form):
    """?lines= of a replica's log page: how many of the last lines to show."""

    lines = forms.IntegerField(required=False, min_value=0, max_value=MAX_LOG_LINES)
