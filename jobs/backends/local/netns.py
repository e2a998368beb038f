"""Network namespaces (iproute2's named ones): one per local job, shared by its replicas, and one
per runtime build.

Inside, only `lo` is up: the replicas reach each other on 127.0.0.1 as before, while the
host's loopback services (Redis, PostgreSQL, the web server) and other jobs' ports are in
other namespaces and out of reach. The name carries a hash of JOBS_ROOT so two installs on
one machine (a dev server beside a test run) never share a namespace.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from ...models import Job

NETNS_DIR = Path("/run/netns")


def name_prefix(jobs_root: Path) -> str:
    """What the names of one install's namespaces start with."""
    return f"pc-{hashlib.sha256(str(jobs_root).encode()).hexdigest()[:8]}-"


def name(job: Job) -> str:
    return f"{name_prefix(settings.JOBS_ROOT)}{job.pk}"


def path(ns: str) -> Path:
    return NETNS_DIR / ns


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def ensure(ns: str) -> Path:
    """The namespace `ns` with loopback up; idempotent (a launch may run twice)."""
    if not path(ns).exists():
        done = _ip("netns", "add", ns)
        if done.returncode and "File exists" not in done.stderr:
            raise OSError(f"ip netns add {ns}: {done.stderr.strip()}")
    done = _ip("-n", ns, "link", "set", "lo", "up")
    if done.returncode:
        raise OSError(f"ip -n {ns} link set lo up: {done.stderr.strip()}")
    return path(ns)


def remove(ns: str) -> None:
    """Drop the namespace (idempotent). Processes still inside keep it alive until they end."""
    if path(ns).exists():
        _ip("netns", "delete", ns)
