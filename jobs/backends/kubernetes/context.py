"""What the parts of the backend need of a datacenter's cluster, and nothing more: its settings,
its API and where the server sees the datacenter's PFS. The image build, the namespace setup,
the layouts and the watcher take this, never the backend object, so none of them imports it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings as django_settings

from ..base import LaunchError
from .client import Api, api_for
from .config import K8sSettings, SettingsError, for_datacenter
from .manifests import snapshot_dir

if TYPE_CHECKING:
    from accounts.models import Datacenter

    from ...models import Job


@dataclass(frozen=True)
class ClusterContext:
    datacenter: str
    settings: K8sSettings
    api: Api

    def namespace(self, username: str) -> str:
        return self.settings.namespace(username)

    def job_namespace(self, job: Job) -> str:
        return self.settings.namespace(job.user.get_username())

    @property
    def pfs_root(self) -> Path:
        """The datacenter's PFS root as the server sees it (the pods mount the same filesystem)."""
        root: Path = django_settings.PFS_ROOT
        return root / self.datacenter

    def snapshot(self, job: Job) -> Path:
        """The job's package copy on the server's view of the shared PFS volume."""
        return self.pfs_root / snapshot_dir(job)


def settings_for(datacenter: Datacenter) -> K8sSettings:
    try:
        return for_datacenter(datacenter)
    except SettingsError as e:
        raise LaunchError("DatacenterMisconfigured", f"datacenter {datacenter.name}: {e}") from e


def context_for(datacenter: Datacenter) -> ClusterContext:
    return ClusterContext(datacenter.name, settings_for(datacenter), api_for(datacenter))


def context_of(api: Api) -> ClusterContext:
    """The context of a watcher's API (its settings name the datacenter)."""
    return ClusterContext(api.settings.datacenter, api.settings, api)
