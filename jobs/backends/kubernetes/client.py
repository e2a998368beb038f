"""Talking to a datacenter's API server with the official client: configuration from the
datacenter's (encrypted) kubeconfig or the pod's service account, and one place that decides
what is retried.

Transient failures (5xx, 429, timeouts, dropped connections) are retried with exponential
backoff and jitter (tenacity); 409 AlreadyExists on create and 404 NotFound on delete are
successes where that is the meaning, so every operation can run twice.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_random_exponential

from ..base import LaunchError
from .config import K8sSettings, SettingsError, for_datacenter

if TYPE_CHECKING:
    from accounts.models import Datacenter

log = logging.getLogger(__name__)
T = TypeVar("T")
# The generated client would send a dict body as a JSON patch (its first content type), which the
# API server refuses: our patches are merge patches.
MERGE_PATCH = "application/merge-patch+json"
_clients: dict[tuple[int, str], client.ApiClient] = {}
_lock = threading.Lock()
# The kinds the backend makes, by the typed API that serves them: (API attribute, method suffix).
TYPED = {"ConfigMap": ("core", "config_map"), "Secret": ("core", "secret"), "Service": ("core", "service"),
         "ResourceQuota": ("core", "resource_quota"), "NetworkPolicy": ("networking", "network_policy"),
         "StatefulSet": ("apps", "stateful_set"), "Job": ("batch", "job")}
# Custom resources: (group, version, plural).
CUSTOM = {"PodGroup": ("scheduling.volcano.sh", "v1beta1", "podgroups"),
          "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets")}


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in (0, 429) or (exc.status or 0) >= 500
    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def configuration(datacenter: Datacenter, settings: K8sSettings) -> client.Configuration:
    cfg = client.Configuration()
    try:
        if datacenter.kubeconfig.strip():
            data = yaml.safe_load(datacenter.kubeconfig)
            config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # kubernetes' config is untyped
                data, context=settings.context or None, client_configuration=cfg, persist_config=False)
        else:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]  # untyped
    except (config.ConfigException, yaml.YAMLError, TypeError, ValueError) as e:
        raise LaunchError("ClusterConfig", f"datacenter {datacenter.name}: cannot configure the Kubernetes "
                                           f"client: {e}") from e
    # Watches and log follows are long-lived: keepalive notices a dead peer without a read
    # timeout that would cut an idle but healthy stream; a larger pool serves the followers.
    cfg.socket_options = tcp_keepalive_socket_options()
    cfg.connection_pool_maxsize = 256
    return cfg


def api_client(datacenter: Datacenter) -> client.ApiClient:
    """One client per datacenter and configuration, shared by the threads of a process."""
    key = (datacenter.pk, hashlib.sha256(f"{datacenter.kubeconfig}\0{datacenter.config}".encode()).hexdigest())
    with _lock:
        api = _clients.get(key)
        if api is None:
            try:
                settings = for_datacenter(datacenter)
            except SettingsError as e:
                raise LaunchError("DatacenterMisconfigured", f"datacenter {datacenter.name}: {e}") from e
            api = client.ApiClient(configuration(datacenter, settings))
            for old in [k for k in _clients if k[0] == datacenter.pk]:
                _clients.pop(old).close()  # type: ignore[no-untyped-call]  # kubernetes' ApiClient is untyped
            _clients[key] = api
        return api


class Api:
    """The typed APIs for one datacenter, each call retried per the policy above."""

    def __init__(self, api: client.ApiClient, settings: K8sSettings):
        self.client = api
        self.settings = settings
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.networking = client.NetworkingV1Api(api)
        self.timeout = settings.api_timeout

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        kwargs.setdefault("_request_timeout", (10, self.timeout))
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            wait=wait_random_exponential(multiplier=0.2, max=10),
            stop=stop_after_attempt(self.settings.api_retries) | stop_after_delay(max(30, 2 * self.timeout)),
            reraise=True,
            before_sleep=lambda rs: log.warning("kubernetes %s failed (%s), retrying", getattr(fn, "__name__", fn),
                                                rs.outcome.exception() if rs.outcome else ""),
        )
        return retrying(fn, *args, **kwargs)

    def one_try_client(self) -> client.ApiClient:
        """A client of its own on the same configuration, for a thread that asks once and moves
        on (the usage sampler, the pod labeller): without urllib3's retries, which would wait on a
        hung server again. Its owner closes it."""
        cfg = copy.copy(self.client.configuration)
        cfg.retries = False
        return client.ApiClient(cfg)

    def call_raw(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        """`call` returning the HTTP response undecoded (its bytes in `.data`); the client's
        type hints do not say that `_preload_content=False` changes what a call returns."""
        resp: urllib3.BaseHTTPResponse = self.call(fn, *args, _preload_content=False, **kwargs)
        return resp

    def create(self, fn: Callable[..., T], *args: Any, body: dict[str, Any], **kwargs: Any) -> T | None:
        """Create; None if it already exists (409), so a repeated launch is harmless."""
        try:
            return self.call(fn, *args, body=body, **kwargs)
        except ApiException as e:
            if e.status == 409:
                return None
            raise

    def delete(self, fn: Callable[..., Any], *args: Any, propagation: str = "Background", **kwargs: Any) -> bool:
        """Delete with propagation to dependents; False if it was already gone (404)."""
        try:
            _read(self.call(fn, *args, body=client.V1DeleteOptions(propagation_policy=propagation), **kwargs))
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """Read; None if it does not exist."""
        try:
            return self.call(fn, *args, **kwargs)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    # --- any kind the backend makes, by its `kind` --------------------------------------------
    def _method(self, verb: str, kind: str) -> tuple[Callable[..., Any], tuple[str, ...]]:
        if kind in CUSTOM:
            group, version, plural = CUSTOM[kind]
            return getattr(self.custom, f"{verb}_namespaced_custom_object"), (group, version)
        api, suffix = TYPED[kind]
        return getattr(getattr(self, api), f"{verb}_namespaced_{suffix}"), ()

    def create_object(self, body: dict[str, Any]) -> bool:
        """Create; False if it already exists (409)."""
        fn, head = self._method("create", body["kind"])
        ns = body["metadata"]["namespace"]
        args = (*head, ns, CUSTOM[body["kind"]][2]) if head else (ns,)
        # Not decoded: a custom object comes back as a dict, a typed one as the client's model.
        return _read(self.create(fn, *args, body=body, _preload_content=False))

    def delete_object(self, kind: str, name: str, ns: str, propagation: str = "Background") -> bool:
        """Delete with propagation; False if it was already gone (404). The answer is not decoded:
        a deleted Service is answered with the Service or a Status, by server version."""
        fn, head = self._method("delete", kind)
        args = (*head, ns, CUSTOM[kind][2], name) if head else (name, ns)
        return self.delete(fn, *args, propagation=propagation, _preload_content=False)

    def patch_object(self, kind: str, name: str, ns: str, patch: dict[str, Any]) -> bool:
        """A merge patch of an object that may not exist (never made, or gone): False then."""
        fn, head = self._method("patch", kind)
        args = (*head, ns, CUSTOM[kind][2], name) if head else (name, ns)
        try:
            _read(self.call(fn, *args, body=patch, _content_type=MERGE_PATCH, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def raw(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """Read as a plain dict (the manifests' form), None if absent."""
        resp = self.read(fn, *args, _preload_content=False, **kwargs)
        if resp is None:
            return None
        import json

        obj: dict[str, Any] = json.loads(resp.data)
        return obj


def _read(resp: Any) -> bool:
    """Consume an undecoded answer, so its connection goes back to the pool; False for None."""
    if isinstance(resp, urllib3.BaseHTTPResponse):
        resp.read()
        resp.release_conn()
    return resp is not None


def api_for(datacenter: Datacenter) -> Api:
    try:
        settings = for_datacenter(datacenter)
    except SettingsError as e:
        raise LaunchError("DatacenterMisconfigured", f"datacenter {datacenter.name}: {e}") from e
    return Api(api_client(datacenter), settings)
