"""Translation between the legacy /api/v1 protocol (protocol-v1.md) and the product's services.
Every rule (names, quotas, isolation, paths) stays in jobs/pfs/accounts; this only renames
fields, finds the user's own objects by the names the old client sends, and builds its texts."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from rest_framework.exceptions import ValidationError as APIValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from accounts import services as accounts
from accounts.api.serializers import RegistrySerializer
from accounts.models import Datacenter, Registry
from jobs import services as jobs
from jobs.models import ACTIVE_STATES, REPLICA_DONE, Job, Replica
from pfs import services as pfs
from pfs.paths import PathError
from pfs.services import Entry

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class LegacyError(Exception):
    """Something the client asked for that is not there (or not its own): `code` goes into the
    protocol's numeric `code` field."""

    def __init__(self, message: str, code: int = 404):
        super().__init__(message)
        self.message, self.code = message, code


def error_text(exc: Exception) -> tuple[int, str]:
    """(code, msg) of a refusal by a service, one line per field as the old client prints it."""
    if isinstance(exc, LegacyError):
        return exc.code, exc.message
    if isinstance(exc, PathError):
        return exc.status, exc.message
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            lines = [f"{'' if field == '__all__' else field + ': '}{m}"
                     for field, messages in exc.message_dict.items() for m in messages]
        else:
            lines = list(exc.messages)
        return 400, "\n".join(lines)
    raise exc


# --- request bodies --------------------------------------------------------------------------

# What /api/v2's text fields refuse (DRF's CharField runs both): PostgreSQL cannot store a NUL,
# and a lone surrogate cannot be encoded for a database or a file name.
_TEXT_CHECKS = (ProhibitNullCharactersValidator(), ProhibitSurrogateCharactersValidator())


def check_body(body: Mapping[str, Any]) -> None:
    """Refuse a v1 JSON body that holds, anywhere in a field's value, text no service can take
    (a NUL, a lone surrogate) or a number beyond a float's range (JSON's 1e400 reads as
    infinity): ValidationError with each such field's errors, as the services report theirs."""
    errors = {str(field): found for field, value in body.items() if (found := _unusable(value))}
    if errors:
        raise ValidationError(errors)


def _unusable(value: object) -> list[str]:
    """What is wrong with the strings and numbers in `value` (nested lists and objects included)."""
    found: list[str] = []
    pending = [value]
    while pending:  # the JSON parser bounds the nesting
        item = pending.pop()
        if isinstance(item, dict):
            pending += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            pending += item
        elif isinstance(item, float) and not math.isfinite(item):
            found.append("numbers must be finite")
        elif isinstance(item, str):
            for check in _TEXT_CHECKS:
                try:
                    check(item)
                except ValidationError as e:
                    found += e.messages
                except APIValidationError as e:  # DRF's validators raise DRF's
                    found += [str(m) for m in e.detail] if isinstance(e.detail, list) else [str(e.detail)]
    return list(dict.fromkeys(found))


# --- auth ------------------------------------------------------------------------------------

def legacy_token(user: User) -> str:
    """A token for an old client, which caches it and never logs in again: it does not expire
    unless the operator sets LEGACY_TOKEN_TTL_DAYS."""
    days = settings.LEGACY_TOKEN_TTL_DAYS
    if days > 0:
        return accounts.create_token(user, ttl=timedelta(days=days))[1]
    return accounts.create_token(user, never_expires=True)[1]


# --- jobs ------------------------------------------------------------------------------------

# v1 key (and seed 003's spelling) -> the submission field of jobs.services.
_JOB_FIELDS = {"name": "name", "parallelism": "trainers", "cpu": "cpu", "gpu": "gpu", "memory": "memory",
               "pservers": "pservers", "pscpu": "pscpu", "psmemory": "psmemory", "entry": "entry",
               "datacenter": "datacenter", "passes": "passes", "image": "image"}


def submission(user: User, body: Mapping[str, Any]) -> dict[str, Any]:
    """The v1 job JSON as jobs.services.submit_job's fields. The package is the PFS path the
    client gives, or, for a local package it uploaded first, jobs/<name>/ in the user's home
    (where the client put its files)."""
    data = {ours: body[theirs] for theirs, ours in _JOB_FIELDS.items() if theirs in body}
    if body.get("faulttolerant"):
        raise ValidationError({"faulttolerant": ["fault-tolerant (elastic) jobs are not supported by this server"]})
    if not data.get("entry") and body.get("topology"):
        data["entry"] = f"python {body['topology']}"  # a v1 config file, run by its own program
    data["mode"] = Job.Mode.PS if _positive(body.get("pservers")) else Job.Mode.COLLECTIVE
    if data["mode"] == Job.Mode.COLLECTIVE:
        # the client always sends its -pscpu/-psmemory defaults; without pservers they mean nothing
        data.pop("pscpu", None)
        data.pop("psmemory", None)
    if data.get("passes") == 0:
        del data["passes"]  # Go's zero value: -passes was not given
    dc = str(data.get("datacenter") or settings.DEFAULT_DATACENTER)
    package = str(body.get("jobPackage") or body.get("job_package") or "")
    data["package"] = package if package.startswith("/pfs/") else \
        f"/pfs/{dc}/home/{user.get_username()}/jobs/{data.get('name', '')}"
    if body.get("registry"):
        data["registry"] = registry_name(user, str(body["registry"]))
    return data


def _positive(value: Any) -> bool:
    # Any: `value` is whatever the client's JSON holds; int() is the check
    try:
        return int(value) > 0
    except (TypeError, ValueError, OverflowError):
        return True  # let validation say what is wrong with it


def registry_name(user: User, name: str) -> str:
    """The client names a registry as the user typed it or as `registry` stored it
    (`pcloud-registry-<name>`); either finds it."""
    if not Registry.objects.filter(user=user, name=name).exists():
        prefixed = f"pcloud-registry-{name}"
        if Registry.objects.filter(user=user, name=prefixed).exists():
            return prefixed
    return name


def own_job(user: User, name: object) -> Job:
    job = jobs.visible_jobs(user).filter(name=str(name or "")).first() if "\x00" not in str(name) else None
    if job is None:
        raise LegacyError(f"no job named '{name}'")
    return job


def kill(user: User, name: object) -> None:
    """`paddlectl kill J` removes the job whatever its state, as the original server did (it
    deleted the job's objects): a running one is stopped first, and its name is free at once.
    The compiled client never sends `-rm`; with or without it the answer is the same."""
    jobs.delete_job(own_job(user, name))


def pod_name(replica: Replica, job: Job) -> str:
    return f"{job.name}-{replica.role}-{replica.index}"


def logs_text(user: User, jobname: str | None, lines: str | None, worker: str | None) -> str:
    """The last `lines` lines of each worker (or of worker `worker`), each after a
    `====<worker>====` header."""
    job = own_job(user, jobname)
    try:
        count = int(lines) if lines not in (None, "") else 10
    except ValueError:
        raise ValidationError({"n": ["must be a whole number"]}) from None
    replicas = [r for r in job.replicas.all() if not worker or pod_name(r, job) == worker]
    if worker and not replicas:
        raise LegacyError(f"job '{job.name}' has no worker '{worker}'")
    out = []
    for r in replicas:
        chunk = jobs.replica_log(r, lines=count)
        text = chunk.text if not chunk.text or chunk.text.endswith("\n") else chunk.text + "\n"
        out.append(f"===={pod_name(r, job)}====\n{text}")
    return "".join(out) or f"job '{job.name}' has no workers"


def running_pods(user: User, datacenter: Datacenter) -> int:
    """Workers of the user's active jobs in the datacenter that have not ended."""
    return Replica.objects.filter(job__user=user, job__datacenter=datacenter, job__state__in=ACTIVE_STATES) \
        .exclude(state__in=REPLICA_DONE).count()


# --- registries ------------------------------------------------------------------------------

def registry_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """`registry add`'s fields for accounts.services.create_registry, checked by the serializer
    /api/v2's registry creation uses (same types, lengths and characters refused)."""
    data = RegistrySerializer(data=body)
    if not data.is_valid():
        raise ValidationError({field: [str(m) for m in messages] for field, messages in data.errors.items()})
    return dict(data.validated_data)


def own_registry(user: User, name: object) -> Registry:
    registry = Registry.objects.filter(user=user, name=str(name or "")).first() if "\x00" not in str(name) else None
    if registry is None:
        raise LegacyError(f"no registry named '{name}'")
    return registry


# --- PFS -------------------------------------------------------------------------------------

# `ls -r` of a huge tree is answered with an error rather than an unbounded response.
MAX_LISTED = 100_000


def _has_glob(part: str) -> bool:
    return any(c in part for c in "*?[")


def expand(user: User, arg: str) -> list[str]:
    """The PFS paths a `paddlectl ls` argument names: itself, or what its glob components
    match (each directory read through pfs.services.listdir, so with its checks)."""
    parts = arg.split("/")
    first = next((i for i, p in enumerate(parts) if _has_glob(p)), None)
    if first is None:
        return [arg]
    found = ["/".join(parts[:first])]
    for part in parts[first:]:
        if not _has_glob(part):
            found = [f"{f}/{part}" for f in found]
            continue
        matched = []
        for base in found:
            try:
                entries = pfs.listdir(user, base)
            except PathError:
                continue
            matched += [e.path for e in entries if e.path != base and fnmatch.fnmatchcase(e.name, part)]
        found = matched
    if not found:
        raise PathError(f"{arg}: no such file or directory", 404)
    return sorted(found)


def ls(user: User, args: list[str], *, recursive: bool) -> list[Entry]:
    out: list[Entry] = []
    for arg in args:
        for path in expand(user, arg):
            pending = [path]
            while pending:
                for entry in pfs.listdir(user, pending.pop()):
                    out.append(entry)
                    if recursive and entry.is_dir:
                        pending.append(entry.path)
                if len(out) > MAX_LISTED:
                    raise PathError(f"more than {MAX_LISTED} entries: list a smaller directory", 413)
    return out


def rm(user: User, args: list[str], *, recursive: bool) -> list[str]:
    """`paddlectl rm`: each argument globbed as `ls` does (the original server ran Go's
    filepath.Glob on each), then every match removed; the paths removed."""
    removed = []
    for arg in args:
        for path in expand(user, arg):
            pfs.remove(user, path, recursive=recursive)
            removed.append(path)
    return removed


def chunk_target(filename: str | None) -> tuple[str, int, int]:
    """(path, offset, chunksize) from a chunk part's filename `chunksize=<n>&offset=<o>&path=<p>`."""
    try:
        fields = parse_qs(filename or "", keep_blank_values=True, max_num_fields=8)
        return fields["path"][0], int(fields["offset"][0]), int(fields["chunksize"][0])
    except (KeyError, ValueError, IndexError):
        raise PathError("the chunk's filename must be chunksize=<n>&offset=<o>&path=<path>") from None


def as_int(value: Any, field: str) -> int:
    # Any: `value` is a query parameter or whatever the client's JSON holds; int() is the check
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a float infinity
        raise PathError(f"{field} must be a whole number") from None
