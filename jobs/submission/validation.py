"""Validation of a job submission: every field checked up front, errors keyed by field, all at once.

First each field's type and bounds, from the spec (jobs/submission/serializer.py); then the rules in
RULES, one small function each, in order. A rule skips fields that already have an error."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from rest_framework import serializers
from rest_framework.fields import empty

from accounts.models import Datacenter, Registry
from pfs.paths import PathError, PfsPath, resolve
from pfs.usage import QuotaExceeded, get_usage
from quotas.services import RESOURCE_FIELDS, effective_quota, job_resources, never_fits
from quotas.units import cpu_millicores, memory_bytes

from .. import spec
from ..backends.contract import RESERVED_ENV
from ..backends.registry import capacity
from ..models import Job
from .serializer import JobSubmitSerializer

if TYPE_CHECKING:
    from django.contrib.auth.models import User

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,299}$")


@dataclass
class Submission:
    """A submission being checked: the cleaned values so far and the errors found."""

    user: User
    package_pending: bool = False  # uploaded with the submission: put in place once all else is valid
    data: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def ok(self, *fields: str) -> bool:
        return not any(f in self.errors for f in fields)

    def fail(self, name: str, message: str) -> None:
        self.errors.setdefault(name, message)


def check_fields(s: Submission, data: Mapping[str, Any]) -> None:
    """Each spec field's type, bounds and default; None and "" mean "not given"."""
    given = {k: v for k, v in data.items() if v is not None and v != ""}
    mode = given.get("mode")
    defaults = spec.defaults(mode if isinstance(mode, str) else "ps")
    for name, f in JobSubmitSerializer().fields.items():
        try:
            s.data[name] = f.run_validation(given.get(name, defaults.get(name, empty)))
        except serializers.ValidationError as e:
            s.fail(name, _first_message(e.detail))


def _first_message(detail: Any) -> str:
    if isinstance(detail, dict):  # a mapping field: the first bad entry, by its key
        key, inner = next(iter(detail.items()))
        return f"the value of {key} {_first_message(inner)}"
    if isinstance(detail, list):
        return _first_message(detail[0])
    return str(detail)


# --- the rules, in the order RULES runs them -----------------------------------------------------
def name_is_free(s: Submission) -> None:
    if not s.ok("name"):
        return
    name = s.data["name"]
    deleting = Job.objects.filter(user=s.user, name=name).values_list("deleting", flat=True).first()
    if deleting:
        s.fail("name", f"a job named '{name}' is still being deleted; try again in a minute")
    elif deleting is not None:
        s.fail("name", f"you already have a job named '{name}'; pick another name or delete that job")
    elif Job.objects.filter(user=s.user, k8s_name=spec.k8s_name(name)).exists():
        s.fail("name", f"'{name}' maps to the same cluster name as one of your jobs; pick another name")


def datacenter_exists(s: Submission) -> None:
    if not s.ok("datacenter"):
        return
    name = s.data["datacenter"] or settings.DEFAULT_DATACENTER
    s.data["datacenter"] = Datacenter.objects.filter(name=name).first()
    if s.data["datacenter"] is None:
        s.fail("datacenter", f"no datacenter named '{name}'")


def pservers_fit_the_mode(s: Submission) -> None:
    if not s.ok("mode", "pservers"):
        return
    if s.data["mode"] == Job.Mode.PS and s.data["pservers"] == 0:
        s.fail("pservers", "parameter-server mode needs at least 1 pserver")
    if s.data["mode"] == Job.Mode.COLLECTIVE and s.data["pservers"]:
        s.fail("pservers", "collective mode has no pservers: set 0")


def quantities_parse(s: Submission) -> None:
    for name, parse in (("cpu", cpu_millicores), ("pscpu", cpu_millicores),
                        ("memory", memory_bytes), ("psmemory", memory_bytes)):
        if s.ok(name):
            try:
                parse(s.data[name])
            except ValueError as e:
                s.fail(name, str(e))


def entry_parses(s: Submission) -> None:
    if not s.ok("entry"):
        return
    try:
        if not shlex.split(s.data["entry"]):
            s.fail("entry", "the entry point is required, e.g. 'python train.py'")
    except ValueError as e:
        s.fail("entry", f"cannot parse the command: {e}")


def image_is_a_reference(s: Submission) -> None:
    if s.ok("image") and s.data["image"] and not _IMAGE.fullmatch(s.data["image"]):
        s.fail("image", "not a valid image reference, e.g. paddlepaddle/paddle:2.6.2")


def registry_is_yours(s: Submission) -> None:
    if not s.ok("registry"):
        return
    name = s.data["registry"]
    s.data["registry"] = Registry.objects.filter(user=s.user, name=name).first() if name else None
    if name and s.data["registry"] is None:
        s.fail("registry", f"you have no registry named '{name}'")


def env_within_limits(s: Submission) -> None:
    if not s.ok("env"):
        return
    env = s.data["env"]
    if len(env) > spec.MAX_ENV_VARS:
        return s.fail("env", f"at most {spec.MAX_ENV_VARS} variables (got {len(env)})")
    total = sum(len(k.encode()) + len(v.encode("utf-8", "replace")) for k, v in env.items())
    if total > spec.MAX_ENV_BYTES:
        s.fail("env", f"at most {spec.MAX_ENV_BYTES // 1024} KiB of names and values together (got {total} bytes)")


def env_names_are_allowed(s: Submission) -> None:
    if not s.ok("env"):
        return
    # Every bad name at once: fixing them one submission at a time is tedious.
    invalid = [key for key in s.data["env"] if not _ENV_NAME.fullmatch(key)]
    reserved = [key for key in s.data["env"] if key in RESERVED_ENV]
    problems = [f"'{key[:64]}' is not a valid environment variable name" for key in invalid[:20]]
    problems += [f"{key} is set by PaddleCloud for every replica and cannot be overridden" for key in reserved]
    if problems:
        s.fail("env", "; ".join(problems))


def exit_codes_parse(s: Submission) -> None:
    if s.ok("permanent_exit_codes"):
        try:
            codes = spec.exit_codes(s.data["permanent_exit_codes"])
        except ValueError:
            return s.fail("permanent_exit_codes", f"at most {spec.MAX_PERMANENT_EXIT_CODES} whole numbers from 1 "
                                                  "to 255, comma-separated, e.g. '2, 127'")
        s.data["permanent_exit_codes"] = ", ".join(str(c) for c in sorted(codes))


def package_is_a_directory(s: Submission) -> None:
    if not s.ok("package"):
        return
    try:
        path = resolve(s.user, s.data["package"])
    except PathError as e:
        return s.fail("package", e.message)
    s.data["package"] = path.virtual
    dc = s.data["datacenter"] if s.ok("datacenter") else None
    if dc is not None and path.datacenter != dc.name:
        s.fail("package", f"the package must be in the job's datacenter (/pfs/{dc.name}/...)")
    elif not s.package_pending and not _is_dir_beneath(path):
        s.fail("package", f"{path.virtual} is not a directory in your storage; upload the package first")


def _is_dir_beneath(path: PfsPath) -> bool:
    """Opened below the home as the snapshot will be: a job may have swapped the package for a
    link since `resolve` checked it, and following that would tell what lies outside the home."""
    try:
        os.close(path.open(os.O_PATH | os.O_DIRECTORY))
    except (OSError, PathError):
        return False
    return True


def could_ever_run(s: Submission) -> None:
    """Refuse what no amount of waiting would start: more than the user's whole quota or the
    datacenter's whole capacity, a priority above the quota's, or a home already full (the job
    could not write its output). Whether it fits now is the queue's business (jobs/lifecycle/queue.py)."""
    if s.errors:
        return
    dc = s.data["datacenter"]
    request = job_resources(**{f: s.data[f] for f in RESOURCE_FIELDS})
    for name, message in never_fits(effective_quota(s.user, dc), capacity(dc), request,
                                    s.data["priority"], dc.name).items():
        s.fail(name, message)
    storage = get_usage(s.user, dc)
    if storage.free_bytes <= 0:
        s.fail("storage", QuotaExceeded(storage.used_bytes + storage.reserved_bytes, storage.limit_bytes).message)


RULES: tuple[Callable[[Submission], None], ...] = (
    name_is_free, datacenter_exists, pservers_fit_the_mode, quantities_parse, entry_parses,
    image_is_a_reference, registry_is_yours, env_within_limits, env_names_are_allowed, exit_codes_parse,
    package_is_a_directory,
    could_ever_run,
)


def validate_submission(user: User, data: Mapping[str, Any], *, package_pending: bool = False) -> dict[str, Any]:
    """Return the cleaned fields of a new job, or raise ValidationError({field: [message]})."""
    if not isinstance(data, Mapping):
        raise ValidationError("a job is an object of field names and values")
    sub = Submission(user, package_pending)
    check_fields(sub, data)
    for rule in RULES:
        rule(sub)
    if sub.errors:
        raise ValidationError({k: [v] for k, v in sub.errors.items()})
    return sub.data
