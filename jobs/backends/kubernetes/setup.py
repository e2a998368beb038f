"""A user's namespace and what it holds for all their jobs: the ResourceQuota that mirrors their
quota, the NetworkPolicies of hardening.py, and the Secrets copied from the service's namespace.

They are asserted once per user and datacenter, and again when what they should be changes (the
quota, the datacenter's settings: a fingerprint of the objects) or after SETUP_TTL_SECONDS, so a
Secret changed at its source or an object someone deleted comes back; not at every launch.
What this process asserted is remembered in memory: a new worker asserts each namespace once.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quotas.services import effective_quota

from ..base import LaunchError
from . import hardening, manifests
from .context import ClusterContext

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from accounts.models import Datacenter

Obj = dict[str, Any]
SETUP_TTL_SECONDS = 600.0
_asserted: dict[tuple[str, str], tuple[str, float]] = {}  # (API server, namespace) -> (fingerprint, until)
_lock = threading.Lock()


def desired(ctx: ClusterContext, user: User, datacenter: Datacenter) -> list[Obj]:
    """The namespace, its quota and its policies as they should be (without the copied Secrets,
    which are read from their source when asserted)."""
    st, username = ctx.settings, user.get_username()
    ns = st.namespace(username)
    quota = effective_quota(user, datacenter)
    return [manifests.namespace(st, username),
            manifests.resource_quota(ns, cpu_millicores=quota.cpu_millicores, memory_bytes=quota.memory_bytes,
                                     gpus=quota.gpus),
            *hardening.namespace_policies(st, ns)]


def shared_secrets(ctx: ClusterContext) -> list[str]:
    st = ctx.settings
    if not st.secrets_namespace:
        return []
    # Registry credentials are never copied whole: see runtime.py and pull.py.
    return [st.storage.secret_name] if st.storage.kind == "cephfs" else []


def ensure_namespace(ctx: ClusterContext, user: User, datacenter: Datacenter) -> str:
    """The user's namespace, set up as desired(); asserted again only when that changed."""
    objects = desired(ctx, user, datacenter)
    ns = ctx.namespace(user.get_username())
    key = (ctx.api.client.configuration.host, ns)
    fingerprint = hashlib.sha256(json.dumps([objects, shared_secrets(ctx)], sort_keys=True).encode()).hexdigest()
    with _lock:
        known, until = _asserted.get(key, ("", 0.0))
    if known == fingerprint and time.monotonic() < until:
        return ns
    _apply(ctx, objects, ns)
    with _lock:
        _asserted[key] = (fingerprint, time.monotonic() + SETUP_TTL_SECONDS)
    return ns


def forget(ctx: ClusterContext, ns: str) -> None:
    """Assert the namespace again next time (it was found missing)."""
    with _lock:
        _asserted.pop((ctx.api.client.configuration.host, ns), None)


def _apply(ctx: ClusterContext, objects: list[Obj], ns: str) -> None:
    api = ctx.api
    api.create(api.core.create_namespace, body=objects[0])
    for body in objects[1:]:
        if not api.create_object(body):  # there already: brought up to date
            replace: Callable[..., Any] = (api.core.replace_namespaced_resource_quota if body["kind"] == "ResourceQuota"
                                           else api.networking.replace_namespaced_network_policy)
            api.call(replace, body["metadata"]["name"], ns, body=body)
    for name in shared_secrets(ctx):
        source = api.raw(api.core.read_namespaced_secret, name, ctx.settings.secrets_namespace)
        if source is None:
            raise LaunchError("SecretMissing", f"datacenter {ctx.datacenter}: Secret {name} not found in "
                                               f"namespace {ctx.settings.secrets_namespace}")
        copy = manifests.copied_secret(source, ns)
        if not api.create_object(copy):
            api.call(api.core.replace_namespaced_secret, name, ns, body=copy)
