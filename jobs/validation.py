"""Validation of a job submission: every field checked up front, errors keyed by field."""

from __future__ import annotations

import re
import shlex
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from accounts.models import Datacenter, Registry, dns_label
from pfs.paths import PathError, resolve
from pfs.usage import QuotaExceeded, get_usage
from quotas.services import check_job_quota, job_resources
from quotas.units import cpu_millicores, memory_bytes

from .contract import RESERVED_ENV
from .models import Job

# Bounds of every number in a job spec (the API schema publishes the same ones).
MAX_TRAINERS = 1000
MAX_PSERVERS = 100
MAX_GPUS = 16
MAX_PASSES = 100_000
MAX_TIMEOUT = 366 * 24 * 3600  # a year, in seconds
MAX_QUANTITY_LENGTH = 20  # cpu/memory strings, as stored
# The environment a user adds to the process contract's: documented limits.
MAX_ENV_VARS = 100
MAX_ENV_BYTES = 32 * 1024  # names and values together, UTF-8
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,299}$")

DEFAULTS: dict[str, Any] = {
    "mode": Job.Mode.PS, "pservers": 0, "trainers": 1, "cpu": "1", "memory": "1Gi", "gpu": 0,
    "pscpu": "1", "psmemory": "1Gi", "image": "", "registry": "", "env": {}, "passes": 1, "timeout": None,
}


def _int(data, field, errors, *, low, high=None):
    value = data.get(field)
    try:
        value = int(value)
        if isinstance(data.get(field), float) and data[field] != value:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        errors[field] = "must be a whole number"
        return None
    if value < low:
        errors[field] = f"must be at least {low}"
    elif high is not None and value > high:
        errors[field] = f"must be at most {high}"
    return value


def validate_submission(user, data: dict, *, package_pending: bool = False) -> dict:
    """Return the cleaned fields of a new job, or raise ValidationError({field: message}).

    `package_pending` skips the package-exists check for a package that is uploaded with the
    submission and put in place only once everything else is known to be valid.
    """
    data = {**DEFAULTS, **{k: v for k, v in data.items() if v is not None and v != ""}}
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}

    name = str(data.get("name", "")).strip()
    try:
        dns_label(name)
        existing = Job.objects.filter(user=user, name=name).values_list("deleting", flat=True).first()
        if existing:
            errors["name"] = f"a job named '{name}' is still being deleted; try again in a minute"
        elif existing is not None:
            errors["name"] = f"you already have a job named '{name}'; pick another name or delete that job"
    except ValidationError as e:
        errors["name"] = "the name is required" if not name else e.messages[0]
    out["name"] = name

    dc_name = str(data.get("datacenter") or settings.DEFAULT_DATACENTER)
    out["datacenter"] = Datacenter.objects.filter(name=dc_name).first()
    if out["datacenter"] is None:
        errors["datacenter"] = f"no datacenter named '{dc_name}'"

    mode = data.get("mode")
    if mode not in Job.Mode.values:
        errors["mode"] = "must be 'ps' or 'collective'"
    out["mode"] = mode

    out["trainers"] = _int(data, "trainers", errors, low=1, high=MAX_TRAINERS)
    out["pservers"] = _int(data, "pservers", errors, low=0, high=MAX_PSERVERS)
    if mode == Job.Mode.PS and out["pservers"] == 0 and "pservers" not in errors:
        errors["pservers"] = "parameter-server mode needs at least 1 pserver"
    if mode == Job.Mode.COLLECTIVE and out["pservers"]:
        errors["pservers"] = "collective mode has no pservers: set 0"
    out["gpu"] = _int(data, "gpu", errors, low=0, high=MAX_GPUS)
    out["passes"] = _int(data, "passes", errors, low=1, high=MAX_PASSES)
    out["timeout"] = None if data.get("timeout") is None else _int(data, "timeout", errors, low=1, high=MAX_TIMEOUT)

    for field, parse in (("cpu", cpu_millicores), ("pscpu", cpu_millicores),
                         ("memory", memory_bytes), ("psmemory", memory_bytes)):
        out[field] = str(data.get(field)).strip()
        try:
            parse(out[field])
        except ValueError as e:
            errors[field] = str(e)
        if len(out[field]) > MAX_QUANTITY_LENGTH:
            errors[field] = f"at most {MAX_QUANTITY_LENGTH} characters"

    entry = str(data.get("entry", "")).strip()
    try:
        if not entry or not shlex.split(entry):
            errors["entry"] = "the entry point is required, e.g. 'python train.py'"
    except ValueError as e:
        errors["entry"] = f"cannot parse the command: {e}"
    if len(entry) > 1024:
        errors["entry"] = "at most 1024 characters"
    out["entry"] = entry

    image = str(data.get("image") or "").strip()
    if image and not _IMAGE.match(image):
        errors["image"] = "not a valid image reference, e.g. paddlepaddle/paddle:2.6.2"
    out["image"] = image
    out["registry"] = None
    if data.get("registry"):
        out["registry"] = Registry.objects.filter(user=user, name=str(data["registry"])).first()
        if out["registry"] is None:
            errors["registry"] = f"you have no registry named '{data['registry']}'"

    env = data.get("env") or {}
    env_error = _env_error(env)
    if env_error:
        errors["env"] = env_error
    out["env"] = {str(k): str(v) for k, v in env.items()} if not env_error else {}

    package = str(data.get("package", "")).strip()
    out["package"] = package
    if not package:
        errors["package"] = "the package path is required, e.g. /pfs/<datacenter>/home/<you>/jobs/<name>"
    else:
        try:
            path = resolve(user, package)
            out["package"] = path.virtual
            if out["datacenter"] is not None and path.datacenter != out["datacenter"].name:
                errors["package"] = f"the package must be in the job's datacenter (/pfs/{out['datacenter'].name}/...)"
            elif not package_pending and not path.disk.is_dir():
                errors["package"] = f"{path.virtual} is not a directory in your storage; upload the package first"
        except PathError as e:
            errors["package"] = e.message

    if not errors:
        # Early answer (before an upload is stored); admission checks again under the user's lock.
        errors.update(admission_errors(user, out))
    if errors:
        raise ValidationError({k: [v] for k, v in errors.items()})
    return out


def _env_error(env) -> str:
    """What is wrong with a user's extra environment (empty when it is fine)."""
    if not isinstance(env, dict):
        return "must be a mapping of NAME to value"
    if len(env) > MAX_ENV_VARS:
        return f"at most {MAX_ENV_VARS} variables (got {len(env)})"
    total = 0
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            return f"'{str(key)[:64]}' is not a valid environment variable name"
        if key in RESERVED_ENV:
            return f"{key} is set by PaddleCloud for every replica and cannot be overridden"
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or "\x00" in str(value):
            return f"the value of {key} must be text"
        total += len(key.encode()) + len(str(value).encode("utf-8", "replace"))
    if total > MAX_ENV_BYTES:
        return f"at most {MAX_ENV_BYTES // 1024} KiB of names and values together (got {total} bytes)"
    return ""


def admission_errors(user, cleaned: dict) -> dict[str, str]:
    """Field errors for a job the user's quotas cannot take now: resources and running jobs, and
    a home already full (the job could not write its output)."""
    dc = cleaned["datacenter"]
    request = job_resources(mode=cleaned["mode"], trainers=cleaned["trainers"], pservers=cleaned["pservers"],
                            cpu=cleaned["cpu"], memory=cleaned["memory"], gpu=cleaned["gpu"],
                            pscpu=cleaned["pscpu"], psmemory=cleaned["psmemory"])
    errors = check_job_quota(user, dc, request)
    storage = get_usage(user, dc)
    if storage.free_bytes <= 0:
        errors["storage"] = QuotaExceeded(storage.used_bytes + storage.reserved_bytes, storage.limit_bytes).message
    return errors
