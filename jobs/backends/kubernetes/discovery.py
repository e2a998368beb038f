"""Whether a cluster serves the APIs a datacenter's settings need, asked when the datacenter is
saved (Backend.check_cluster): a gang scheduler that is not installed would otherwise leave every
job waiting. The API discovery (GET /apis/<group>/<version>) is open to every authenticated user
(the `system:discovery` role), so this needs no permission of its own."""

from __future__ import annotations

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .config import K8sSettings
from .gang import KUEUE, VOLCANO

# What each gang scheduler needs served: (what to install, group, version, resource).
NEEDS = {
    VOLCANO: [("Volcano", "scheduling.volcano.sh", "v1beta1", "podgroups")],
    KUEUE: [("Kueue", "kueue.x-k8s.io", "v1beta1", "workloads"),
            ("the JobSet controller (0.8+)", "jobset.x-k8s.io", "v1alpha2", "jobsets")],
}
TIMEOUT = (3, 5)


def _client(settings: K8sSettings, kubeconfig: str) -> client.ApiClient:
    cfg = client.Configuration()
    try:
        if kubeconfig.strip():
            config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]  # kubernetes' config is untyped
                yaml.safe_load(kubeconfig), context=settings.context or None, client_configuration=cfg,
                persist_config=False)
        else:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]  # untyped
    except (config.ConfigException, yaml.YAMLError, TypeError, ValueError) as e:
        raise ValueError(f"cannot reach the cluster to check that {settings.gang_scheduler} is installed: {e}") from e
    cfg.retries = False  # one quick answer: someone is waiting on the form
    return client.ApiClient(cfg)


def check_installed(settings: K8sSettings, kubeconfig: str) -> None:
    """ValueError naming what to install if the cluster lacks an API the settings need."""
    needed = NEEDS.get(settings.gang_scheduler, [])
    if not needed:
        return
    api = _client(settings, kubeconfig)
    try:
        for what, group, version, resource in needed:
            served: set[str] = set()
            try:
                found = client.CustomObjectsApi(api).get_api_resources(group, version, _request_timeout=TIMEOUT)
                served = {r.name for r in found.resources or []}
            except ApiException as e:
                if e.status != 404:
                    raise ValueError(f"the cluster refused the check for {what} ({group}/{version}): "
                                     f"{e.status} {e.reason}") from e
            except Exception as e:  # unreachable, TLS, timeout: the operator is told
                raise ValueError(f"cannot reach the cluster to check that {what} is installed: {e}") from e
            if resource not in served:
                raise ValueError(f"gang_scheduler {settings.gang_scheduler}: the cluster does not serve {resource} "
                                 f"({group}/{version}): install {what} first")
    finally:
        api.close()  # type: ignore[no-untyped-call]  # kubernetes' ApiClient is untyped
