"""Which class runs a datacenter's jobs: the one place that maps a datacenter's `backend` value to
its implementation. Adding a backend is a folder under jobs/backends/ and a line here (and the
choice on accounts.models.Datacenter.Backend, which the admin and the forms offer).

Classes are named by dotted path and imported when first used, so nothing imports a backend it
does not run (the Kubernetes client stays unloaded on a local-only install) and no backend
module is imported by the modules that drive it.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, cast

from django.utils.module_loading import import_string

from quotas import services as quotas
from quotas.services import Capacity

from .base import Backend, LaunchError, Watcher

if TYPE_CHECKING:
    from accounts.models import Datacenter

BACKENDS: dict[str, str] = {
    "local": "jobs.backends.local.backend.LocalBackend",
    "kubernetes": "jobs.backends.kubernetes.backend.KubernetesBackend",
}


@cache
def backend_class(name: str) -> type[Backend]:
    """The class registered as `name`; LookupError if none is."""
    try:
        path = BACKENDS[name]
    except KeyError:
        raise LookupError(name) from None
    return cast("type[Backend]", import_string(path))  # import_string returns Any


def get_backend(datacenter: Datacenter) -> Backend:
    try:
        return backend_class(datacenter.backend)(datacenter)
    except LookupError:
        raise LaunchError("NoBackend", f"datacenter {datacenter.name}: the {datacenter.backend} backend is "
                                       "not available") from None


def watchers() -> list[Watcher]:
    """One watcher per registered backend, for the watch loop."""
    return [backend_class(name).watcher(name) for name in BACKENDS]


def capacity(datacenter: Datacenter) -> Capacity:
    """What the queue admits the datacenter's jobs against: the operator's figures where set, else
    what its backend's machines have (Backend.capacity)."""
    try:
        machine = backend_class(datacenter.backend).capacity()
    except LookupError:
        machine = Capacity(None, None, None)
    return quotas.capacity(datacenter, machine)
