"""`PaddleJob`: a job description with seed 002's parameters, turned into an API request."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

# Seed 004's job names; the server keeps them as typed and names cluster objects after them.
NAME_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def check_job_name(name: str) -> str:
    """The server's name rule, checked early so nothing is uploaded for nothing."""
    if not name:
        raise ValueError("name: a job name is required")
    if len(name) > 40:
        raise ValueError(f"name: job name '{name}' is longer than 40 characters")
    if not NAME_RE.match(name):
        raise ValueError(f"name: job name '{name}' may only contain letters, digits, '-' and '.', and must start "
                         "with a letter and end with a letter or digit (no '_')")
    return name


def suggest_job_name(text: str) -> str:
    """A valid job name made from a directory name: fit_a_line -> fit-a-line."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return re.sub(r"-{2,}", "-", name)[:40].strip("-") or "job"


@dataclass
class CephFSVolume:
    """Seed 002's CephFS settings. On PaddleCloud the operator configures storage for every job,
    so these are accepted for compatibility and not sent."""

    monitors_addr: str
    user: str = "admin"
    secret_name: str = "cephfs-secret"
    mount_path: str = "/mnt/cephfs"
    path: str = "/"


@dataclass
class PaddleJob:
    """A training job. Required (seed 002): job_name, entry_point; the package is a local
    directory (uploaded on submit) or a /pfs path, given as `trainer_package_path` or `package`."""

    job_name: str
    entry_point: str = "python train.py"
    trainer_package_path: str | None = None
    memory: str = "1Gi"
    cpu_nums: int | str = 1
    runtime_image: str = ""
    pservers: int = 2
    trainers: int = 3
    gpu_nums: int = 0
    cephfs_volume: CephFSVolume | None = None
    # PaddleCloud additions
    mode: str = "ps"
    pscpu: int | str = 1
    psmemory: str = "1Gi"
    passes: int = 1
    env: dict[str, str] = field(default_factory=dict)
    registry: str | None = None
    datacenter: str | None = None
    timeout: int | None = None
    priority: int = 0  # among your queued jobs, higher first (up to your quota's maximum)
    fail_fast: bool = False  # refuse instead of queueing when it does not fit now
    # seed 002's example spellings
    namespace: str | None = None
    use_gpu: bool = False
    cpu_num: int | str | None = None

    def __post_init__(self) -> None:
        check_job_name(self.job_name)
        if self.cpu_num is not None:
            self.cpu_nums = self.cpu_num
        if self.use_gpu and not self.gpu_nums:
            self.gpu_nums = 1
        if self.mode not in ("ps", "collective"):
            raise ValueError("mode must be 'ps' (parameter servers) or 'collective'")
        if self.mode == "collective":
            self.pservers = 0
        if self.namespace:
            warnings.warn("PaddleJob(namespace=...) is ignored: PaddleCloud runs each user's jobs in their own "
                          "namespace", stacklevel=2)
        if self.cephfs_volume is not None:
            warnings.warn("PaddleJob(cephfs_volume=...) is ignored: the operator configures storage for all jobs",
                          stacklevel=2)

    @property
    def package(self) -> str | None:
        return self.trainer_package_path

    def to_request(self, package: str) -> dict[str, Any]:
        """The body of POST /api/v2/jobs/."""
        body: dict[str, Any] = {
            "name": self.job_name, "package": package, "entry": self.entry_point, "mode": self.mode,
            "trainers": self.trainers, "pservers": self.pservers, "cpu": str(self.cpu_nums), "memory": self.memory,
            "gpu": self.gpu_nums, "pscpu": str(self.pscpu), "psmemory": self.psmemory, "passes": self.passes,
            "env": {str(k): str(v) for k, v in self.env.items()},
        }
        for key, value in (("image", self.runtime_image), ("registry", self.registry),
                           ("datacenter", self.datacenter), ("timeout", self.timeout),
                           ("priority", self.priority), ("fail_fast", self.fail_fast)):
            if value:
                body[key] = value
        return body
