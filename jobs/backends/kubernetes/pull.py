"""Registry credentials: the `<job>-pull` dockerconfigjson Secret the job's pods pull their images
with (the job's registry, if it names one; for a runtime image the datacenter built, the
read-only `build.pull_secret`), and reading the shared ones from the service's namespace.

The push credentials of image builds never go into a job's pull Secret: without a
`build.pull_secret`, pods pull runtime images without credentials (the registry must allow
that), and the push credentials live only in the build's own short-lived Secret (runtime.py)."""

from __future__ import annotations

import json
from base64 import b64decode
from typing import TYPE_CHECKING, Any

from ..base import LaunchError
from . import manifests
from .config import K8sSettings
from .context import ClusterContext

if TYPE_CHECKING:
    from ...models import Job

Obj = dict[str, Any]


def runtime_pull_secret(settings: K8sSettings) -> str:
    """The read-only Secret pods pull runtime images with; "" for none."""
    return settings.build.pull_secret if settings.secrets_namespace else ""


def pull_secret_names(settings: K8sSettings, job: Job, runtime_ready: bool) -> tuple[str, ...]:
    built = runtime_ready and runtime_pull_secret(settings)
    return (manifests.pull_secret_name(job),) if job.registry_id or built else ()


def shared_auths(ctx: ClusterContext, name: str) -> dict[str, Obj]:
    """The registry auths of a dockerconfigjson Secret in the service's namespace."""
    st = ctx.settings
    source = ctx.api.raw(ctx.api.core.read_namespaced_secret, name, st.secrets_namespace)
    if source is None:
        raise LaunchError("SecretMissing", f"Secret {name} not found in namespace {st.secrets_namespace}")
    raw = (source.get("data") or {}).get(".dockerconfigjson")
    auths: dict[str, Obj] = (json.loads(b64decode(raw)).get("auths") or {}) if raw else {}
    return auths


def ensure_pull_secret(ctx: ClusterContext, job: Job, ns: str, owner: Obj, runtime_ready: bool) -> tuple[str, ...]:
    names = pull_secret_names(ctx.settings, job, runtime_ready)
    if not names:
        return ()
    auths: dict[str, Obj] = {}
    if runtime_ready and runtime_pull_secret(ctx.settings):
        auths.update(shared_auths(ctx, runtime_pull_secret(ctx.settings)))
    if (reg := job.registry) is not None:  # no query when the job names no registry
        auths[reg.server] = manifests.docker_auth(reg.username, reg.password)
    ctx.api.create_object(manifests.dockerconfig_secret(names[0], ns, auths, manifests.labels(job), owner))
    return names
