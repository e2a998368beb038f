"""Image pull credentials of a job's pods: the `<job>-pull` dockerconfigjson Secret, with the
job's registry (if it names one) and, for a runtime image the datacenter built, the read-only
pull credentials (never the push secret whole: see runtime.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import manifests
from .client import Api
from .config import K8sSettings

if TYPE_CHECKING:
    from ...models import Job


def runtime_pull_secret(settings: K8sSettings) -> str:
    """Pods pull runtime images with the read-only pull_secret, else the push secret (whose
    copy the kubelet uses; no container mounts it, and pods have no API token to read it)."""
    st = settings
    return (st.build.pull_secret or st.build.push_secret) if st.secrets_namespace else ""


def pull_secret_names(settings: K8sSettings, job: Job, runtime_ready: bool) -> list[str]:
    built = runtime_ready and runtime_pull_secret(settings)
    return [manifests.pull_secret_name(job)] if job.registry_id or built else []


def ensure_pull_secret(api: Api, settings: K8sSettings, job: Job, ns: str, owner: dict[str, Any],
                       runtime_ready: bool) -> list[str]:
    names = pull_secret_names(settings, job, runtime_ready)
    if not names:
        return []
    auths: dict[str, dict[str, Any]] = {}
    if runtime_ready and runtime_pull_secret(settings):
        from .runtime import shared_auths

        auths.update(shared_auths(api, settings, runtime_pull_secret(settings)))
    if (reg := job.registry) is not None:  # no query when the job names no registry
        auths[reg.server] = manifests.docker_auth(reg.username, reg.password)
    body = manifests.dockerconfig_secret(names[0], ns, auths, manifests.labels(job), owner)
    api.create(api.core.create_namespaced_secret, ns, body=body)
    return names
