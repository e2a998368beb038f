"""The job spec: every field a user gives when submitting a job, declared once.

Each `Field` holds the type, default, bounds, help text and the surfaces that show it. The
model's column options and CheckConstraints, the page's form fields, the API's submit serializer
(and so the OpenAPI schema) and the type/bounds part of validation are all derived from `SPEC`
(the derivations are in jobs/models.py, jobs/forms.py and jobs/api/serializers.py); the rules that
need more than one field or the database are named functions in jobs/submission/validation.py.

A new field is one `Field` below, its column line on the Job model (`x = spec.model_field("x")`)
with its migration, and its behaviour (a rule in validation.RULES if it has one); the tests in
jobs/tests/test_spec.py fail until every surface carries it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

from django.db import models

MODES = (("ps", "Parameter servers + trainers"), ("collective", "Collective trainers"))

# Seed 004: "jobname can only contain alphabet character, number, `-` `.`, and must end with
# combination of character or number, NO `_` is allowed". It also starts with a letter, so every
# Kubernetes name made from it is a valid DNS-1035 label (Service names must start with a letter).
NAME_MAX = 40
NAME_PATTERN = r"^[A-Za-z]([A-Za-z0-9.-]*[A-Za-z0-9])?$"
NAME_RULE = (f"1-{NAME_MAX} letters, digits, '-' and '.', starting with a letter and ending with a letter or "
             "digit; no '_'")
# Object names on Kubernetes: the job's name when it is already a lowercase DNS label, else
# lowercase with '.' -> '-' and a hash of the exact name, so MyJob, myjob, my.job and my-job never
# share objects. NAME_MAX leaves room for the longest suffix a replica's objects get (a
# StatefulSet's pods carry "<name>-pserver-<controller revision hash>" labels of 63 at most).
_K8S_HASH = 8

MAX_TRAINERS = 1000
MAX_PSERVERS = 100
MAX_GPUS = 16
MAX_PASSES = 100_000
MAX_TIMEOUT = 366 * 24 * 3600  # a year, in seconds
MAX_QUANTITY_LENGTH = 20  # cpu/memory strings, as stored
# The environment a user adds to the process contract's: documented limits.
MAX_ENV_VARS = 100
MAX_ENV_BYTES = 32 * 1024  # names and values together, UTF-8
MAX_PRIORITY = 100
MAX_RESTARTS = 100
MAX_PERMANENT_EXIT_CODES = 20
RESTART_MODES = (("replica", "Restart the failed trainer alone"),
                 ("gang", "Restart every replica of the job"))

Kind = Literal["name", "text", "int", "bool", "choice", "quantity", "env", "ref"]
# The submit page's sections, in order; each form field names its own.
GROUPS = ("Job", "Package", "Trainers", "Parameter servers", "Queue and restarts", "Options")
Surface = Literal["api", "form"]
REQUIRED = object()  # default of a field the user must give


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    help: str
    default: Any = REQUIRED
    label: str = ""
    min: int | None = None
    max: int | None = None
    max_length: int | None = None
    nullable: bool = False  # None means "not set" (e.g. no timeout)
    choices: tuple[tuple[str, str], ...] = ()
    surfaces: tuple[Surface, ...] = ("api", "form")
    group: str = "Options"  # its section of the submit page (GROUPS)
    # A default that depends on the mode, e.g. pservers: 1 in ps mode, 0 in collective.
    mode_defaults: tuple[tuple[str, Any], ...] = ()
    # The datacenter backends that use it (the submit page shows it only for those); empty: all.
    backends: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def default_for(self, mode: str) -> Any:
        return dict(self.mode_defaults).get(mode, self.default)


SPEC: tuple[Field, ...] = (
    Field("name", "name", f"{NAME_RULE}. Unique among your jobs; shown as you typed it.", max_length=NAME_MAX,
          group="Job"),
    Field("datacenter", "ref", "Where the job runs; the default datacenter when empty.", default="",
          max_length=40, group="Job"),
    Field("mode", "choice", "Parameter servers + trainers, or collective trainers (all-reduce).", default="ps",
          choices=MODES, max_length=12, group="Job"),
    Field("package", "text", "PFS directory of the training package, e.g. /pfs/<dc>/home/<you>/jobs/<name>.",
          label="Package path", max_length=1024, group="Package"),
    Field("entry", "text", "The command each replica runs in the package directory, e.g. 'python train.py'.",
          max_length=1024, group="Package"),
    Field("trainers", "int", f"Number of trainer processes, 1 to {MAX_TRAINERS}.", default=1, min=1,
          max=MAX_TRAINERS, group="Trainers"),
    Field("pservers", "int", f"Number of parameter servers, 0 to {MAX_PSERVERS}: at least 1 in ps mode (default "
                             "1), 0 in collective mode (default 0).",
          default=1, min=0, max=MAX_PSERVERS, mode_defaults=(("collective", 0),), group="Parameter servers"),
    Field("cpu", "quantity", "CPU per trainer: cores (1, 0.5) or millicores (500m).", default="1", label="CPU",
          max_length=MAX_QUANTITY_LENGTH, group="Trainers"),
    Field("memory", "quantity", "Memory per trainer, e.g. 512Mi or 2Gi.", default="1Gi",
          max_length=MAX_QUANTITY_LENGTH, group="Trainers"),
    Field("gpu", "int", f"GPUs per trainer, 0 to {MAX_GPUS}.", default=0, min=0, max=MAX_GPUS, label="GPU",
          group="Trainers", backends=("kubernetes",)),
    Field("pscpu", "quantity", "CPU per parameter server.", default="1", label="Pserver CPU",
          max_length=MAX_QUANTITY_LENGTH, group="Parameter servers"),
    Field("psmemory", "quantity", "Memory per parameter server.", default="1Gi", label="Pserver memory",
          max_length=MAX_QUANTITY_LENGTH, group="Parameter servers"),
    Field("passes", "int", f"Number of passes over the data (PADDLE_INIT_NUM_PASSES), 1 to {MAX_PASSES}.",
          default=1, min=1, max=MAX_PASSES),
    Field("image", "text", "Docker image (Kubernetes datacenters); the datacenter's default when empty.",
          default="", max_length=300, backends=("kubernetes",)),
    Field("registry", "ref", "One of your registries, to pull a private image.", default="", max_length=40,
          backends=("kubernetes",)),
    Field("env", "env", f"Extra environment variables: at most {MAX_ENV_VARS}, {MAX_ENV_BYTES // 1024} KiB of "
                        "names and values together, names like [A-Za-z_][A-Za-z0-9_]*, none of the process "
                        "contract's.", default={}, label="Environment"),
    Field("timeout", "int", f"Fail the job after this many seconds running (1 to {MAX_TIMEOUT}); no limit when "
                            "empty.", default=None, min=1, max=MAX_TIMEOUT, nullable=True),
    Field("priority", "int", f"Queued jobs with a higher priority start first (0 to {MAX_PRIORITY}; at most your "
                             "quota's maximum priority).", default=0, min=0, max=MAX_PRIORITY,
          group="Queue and restarts"),
    Field("fail_fast", "bool", "Fail at once instead of waiting in the queue when the job does not fit your quota "
                               "or the datacenter's free capacity.", default=False, label="Fail fast",
          group="Queue and restarts"),
    Field("max_restarts", "int", f"How many times failed replicas are restarted before the job fails (0 to "
                                 f"{MAX_RESTARTS}); the datacenter's default when empty.", default=None, min=0,
          max=MAX_RESTARTS, nullable=True, label="Max restarts", group="Queue and restarts"),
    Field("restart_mode", "choice", "replica: a failed trainer is restarted alone; gang: any failure (a parameter "
                                    "server's always) restarts every replica.", default="replica",
          choices=RESTART_MODES, max_length=12, label="Restart mode", group="Queue and restarts"),
    Field("permanent_exit_codes", "text", "Exit codes that fail the job at once, never restarted: comma-separated, "
                                          f"1 to 255, at most {MAX_PERMANENT_EXIT_CODES} (2: bad arguments).",
          default="2", max_length=100, label="Permanent exit codes", group="Queue and restarts"),
)
FIELDS: dict[str, Field] = {f.name: f for f in SPEC}


def defaults(mode: str = "ps") -> dict[str, Any]:
    """Every optional field's default for a job in `mode` (fresh copies of mutable ones)."""
    return {f.name: _copy(f.default_for(mode)) for f in SPEC if not f.required}


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


def surface(name: Surface) -> tuple[Field, ...]:
    return tuple(f for f in SPEC if name in f.surfaces)


def k8s_name(name: str) -> str:
    """The Kubernetes-safe, collision-proof object name of a job named `name` (see _K8S_HASH)."""
    base = name.lower().replace(".", "-")
    if base == name:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_K8S_HASH]
    return f"{base[:NAME_MAX - _K8S_HASH - 1].rstrip('-')}-{digest}"


def exit_codes(text: str) -> set[int]:
    """The exit codes of a permanent_exit_codes value ("2, 127"); ValueError if it is not one."""
    codes = {int(part) for part in text.replace(" ", "").split(",") if part}
    if len(codes) > MAX_PERMANENT_EXIT_CODES or not all(1 <= c <= 255 for c in codes):
        raise ValueError(f"at most {MAX_PERMANENT_EXIT_CODES} exit codes from 1 to 255, comma-separated")
    return codes


def valid_name(name: str) -> bool:
    return len(name) <= NAME_MAX and re.fullmatch(NAME_PATTERN, name) is not None


def check_constraints(table: str) -> list[models.CheckConstraint]:
    """The database's copy of the spec's bounds and choices (a last line behind validation)."""
    out = [models.CheckConstraint(condition=models.Q(name__regex=NAME_PATTERN), name=f"{table}_name_format")]
    for f in SPEC:
        if f.kind == "int":
            bounds = models.Q(**{f"{f.name}__gte": f.min, f"{f.name}__lte": f.max})
            if f.nullable:
                bounds |= models.Q(**{f"{f.name}__isnull": True})
            out.append(models.CheckConstraint(condition=bounds, name=f"{table}_{f.name}_range"))
        elif f.kind == "choice":
            out.append(models.CheckConstraint(condition=models.Q(**{f"{f.name}__in": [c for c, _ in f.choices]}),
                                              name=f"{table}_{f.name}_choice"))
    return out


def model_field(name: str) -> models.Field[Any, Any]:
    """The model column of a spec field (refs are foreign keys declared on the model itself)."""
    f = FIELDS[name]
    common: dict[str, Any] = {"help_text": f.help}
    if not f.required:
        common["default"] = dict if f.kind == "env" else f.default
    if f.kind == "int":
        return models.PositiveIntegerField(null=f.nullable, blank=f.nullable, **common)
    if f.kind == "bool":
        return models.BooleanField(**common)
    if f.kind == "env":
        return models.JSONField(blank=True, **common)
    if f.kind == "choice":
        return models.CharField(max_length=f.max_length, choices=f.choices, **common)
    return models.CharField(max_length=f.max_length, blank=f.default == "", **common)
