"""The local sandbox as the service sees it: what the launcher (launcher/) can enforce on this
machine, and which uid a user's jobs run as. The sandbox itself is built by the launcher, from
checked fields of each request (launcher/sandbox.py): the service never runs anything as root.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings

from .launcher_client import LauncherError, ask

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)


class Unavailable(Exception):
    """The sandbox cannot run here; the message says why and how to fix it."""


@dataclass(frozen=True)
class Status:
    """What the launcher reports: its mode, why the sandbox cannot run (None: it can), and which
    cgroup limits it enforces."""

    rootless: bool = False
    why: str | None = None
    enforced: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)


def status() -> Status:
    try:
        found = ask("status")
    except LauncherError as e:
        return Status(why=str(e))
    cgroups = found["cgroups"]
    return Status(found["rootless"], found["sandbox"], cgroups["enforced"], cgroups["missing"])


def probe() -> str | None:
    """None when jobs can be sandboxed here, else why not and the fix."""
    return status().why


def log_what_is_missing() -> Status:
    """Say, never silently, what the local sandbox cannot enforce on this machine."""
    found = status()
    if found.why:
        log.warning("local jobs cannot be sandboxed here, so they fail (SandboxUnavailable): %s", found.why)
    if found.missing:
        log.warning("local jobs: limits NOT enforced: %s",
                    "; ".join(f"{name}: {why}" for name, why in sorted(found.missing.items())))
    return found


def job_uid(user: User) -> int:
    """The uid `user`'s jobs run as: the first of JOB_UIDS (the runtime builds') plus the user's id."""
    first, last = (int(v) for v in settings.JOB_UIDS.split("-"))
    uid: int = first + user.pk
    if uid > last:
        raise Unavailable(f"no job uid for user {user.pk}: JOB_UIDS {settings.JOB_UIDS} holds {last - first} users")
    return uid
