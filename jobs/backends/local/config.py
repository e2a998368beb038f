"""Settings of a `local` datacenter, read from its Datacenter.config (JSON); every key is optional.

    isolation   "sandbox" (default): every replica runs in a bubblewrap sandbox as a uid that owns
                nothing on the host, in a network namespace of its job, seeing only its working copy,
                its user's home, the public area (read-only) and its runtime (read-only).
                "none": the explicit single-user opt-out. Replicas run as the service's own user and
                can read and change everything the service can (its database, secret key, every
                user's files). Only for a machine where the one user is also the operator.
    internet    false (default): a sandboxed job reaches nothing outside its own network namespace.
                true: it also gets a NAT'd route out through slirp4netns (egress.py), with the host's
                loopback disabled: the internet and the host's outward addresses, never 127.0.0.1.
    pids_limit  the most processes and threads one replica may have (default 1024); a fork bomb
                stops there. Enforced through the cgroup pids controller where the machine has it.
    disk_limit  the most one replica may write to its working copy and /tmp together (default
                "10Gi", a Kubernetes quantity); a replica that writes more fails with reason DiskLimit
                and what it wrote there is removed. No single file may grow past it either.

Example: {"isolation": "sandbox", "internet": true, "pids_limit": 2048, "disk_limit": "50Gi"}
"""

from __future__ import annotations

from dataclasses import dataclass

from quotas.units import quantity

ISOLATION_CHOICES = ("sandbox", "none")
DEFAULT_PIDS_LIMIT = 1024
DEFAULT_DISK_LIMIT = 10 << 30
KEYS = frozenset({"isolation", "internet", "pids_limit", "disk_limit"})


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class LocalSettings:
    isolation: str = "sandbox"
    internet: bool = False
    pids_limit: int = DEFAULT_PIDS_LIMIT
    disk_limit: int = DEFAULT_DISK_LIMIT  # bytes

    @property
    def sandboxed(self) -> bool:
        return self.isolation == "sandbox"


def parse(config: object) -> LocalSettings:
    """The datacenter's local settings; SettingsError names the first bad key."""
    config = config or {}
    if not isinstance(config, dict):
        raise SettingsError("config must be a JSON object")
    unknown = sorted(set(config) - KEYS)
    if unknown:
        raise SettingsError(f"unknown key {unknown[0]!r} for a local datacenter (known: {', '.join(sorted(KEYS))})")
    isolation = config.get("isolation", "sandbox")
    if isolation not in ISOLATION_CHOICES:
        raise SettingsError(f"isolation: must be one of {', '.join(ISOLATION_CHOICES)}")
    internet = config.get("internet", False)
    if not isinstance(internet, bool):
        raise SettingsError("internet: must be true or false")
    pids = config.get("pids_limit", DEFAULT_PIDS_LIMIT)
    if isinstance(pids, bool) or not isinstance(pids, int) or not 16 <= pids <= 4_194_304:
        raise SettingsError("pids_limit: must be a whole number from 16 to 4194304")
    try:
        disk = int(quantity(str(config.get("disk_limit", DEFAULT_DISK_LIMIT))))
    except ValueError:
        disk = 0
    if not 1 << 20 <= disk <= 1 << 50:
        raise SettingsError('disk_limit: must be a quantity from 1Mi to 1Pi, e.g. "20Gi"')
    return LocalSettings(isolation, internet, pids, disk)
