"""What keeps a job's pods to themselves on Kubernetes (pure functions, like manifests.py):
security contexts for every container the backend emits, and the NetworkPolicies of a user's
namespace and of each job.

Pods: no privilege escalation (no_new_privs), every capability dropped, the runtime's default
seccomp profile, no host namespaces, no service-account token, and a fixed non-root uid/gid
(settings.run_as_user). No fsGroup: the kubelet would chown the whole shared PFS volume on every
start. The image build is the exception that must run as root (kaniko unpacks images and runs
RUN steps as the image's root): it keeps only the file capabilities that needs.

Network (NetworkPolicies are allow-lists, additive; a pod selected by none is unrestricted, so
`paddlecloud-isolation` selects every pod of the namespace):
- `paddlecloud-isolation`: no ingress at all; egress to the cluster DNS, to the internet when
  `internet` is "all" (never the private, link-local or loopback ranges: pods, Services, nodes
  and cloud metadata live there), and with `cluster_egress` to pods of namespaces that are
  neither the control plane (its label) nor another user's (managed by PaddleCloud).
- `paddlecloud-build`: the image build's pods may also reach the internet ("all" or "build"),
  and the datacenter's registry where it is not on the internet (`build.registry_cidrs`, or
  `build.registry_namespace` for one in the cluster).
- `<job>-peers` (per job, owned by its root): its pods reach each other, in and out.
So other namespaces, the user's other jobs and the service's database and Redis are unreachable.
These need a CNI that enforces NetworkPolicy (Calico, Cilium, ...); others ignore them.
"""

from __future__ import annotations

from typing import Any

from .config import K8sSettings

Obj = dict[str, Any]
ISOLATION = "paddlecloud-isolation"
BUILD_EGRESS = "paddlecloud-build"
MANAGED_BY = ("app.kubernetes.io/managed-by", "paddlecloud")
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace (1.21+)
# kaniko as root: unpacking layers chowns files (CHOWN, FOWNER), writes where root's bits say no
# (DAC_OVERRIDE), applies USER steps and file capabilities (SETUID, SETGID, SETFCAP).
BUILD_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETFCAP", "SETGID", "SETUID"]


def container_security(add_capabilities: list[str] | None = None) -> Obj:
    caps: Obj = {"drop": ["ALL"]}
    if add_capabilities:
        caps["add"] = list(add_capabilities)
    return {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": caps}


def pod_security(settings: K8sSettings) -> Obj:
    """Training pods: the datacenter's uid/gid, or the image's user where run_as_user is 0."""
    out: Obj = {"seccompProfile": {"type": "RuntimeDefault"}}
    if settings.run_as_user:
        out.update(runAsNonRoot=True, runAsUser=settings.run_as_user, runAsGroup=settings.run_as_group)
    return out


def build_pod_security() -> Obj:
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def harden(spec: Obj, settings: K8sSettings) -> Obj:
    """Applies the training pods' rules to a pod spec (every container, init ones too)."""
    spec.update(securityContext=pod_security(settings), automountServiceAccountToken=False,
                hostNetwork=False, hostPID=False, hostIPC=False)
    for c in spec.get("initContainers", []) + spec["containers"]:
        c["securityContext"] = container_security()
    return spec


# --- NetworkPolicies ---------------------------------------------------------------------------
def _policy(name: str, ns: str, labels: dict[str, str], selector: Obj, types: list[str], *,
            ingress: list[Obj] | None = None, egress: list[Obj] | None = None, owner: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": ns, "labels": dict(labels)}
    if owner:
        meta["ownerReferences"] = [owner]
    spec: Obj = {"podSelector": selector, "policyTypes": types}
    if ingress is not None:
        spec["ingress"] = ingress
    if egress is not None:
        spec["egress"] = egress
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}


def internet_rule(settings: K8sSettings) -> Obj:
    excepts = settings.network.internet_except
    v4 = [c for c in excepts if ":" not in c]
    v6 = [c for c in excepts if ":" in c]
    return {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", **({"except": v4} if v4 else {})}},
                   {"ipBlock": {"cidr": "::/0", **({"except": v6} if v6 else {})}}]}


def namespace_policies(settings: K8sSettings, ns: str) -> list[Obj]:
    """The policies every user namespace gets when it is made (replaced when settings change)."""
    net = settings.network
    labels = {MANAGED_BY[0]: MANAGED_BY[1]}
    dns = {"to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: net.dns_namespace}},
                   "podSelector": {"matchLabels": dict(net.dns_pod_labels)}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    egress = [dns]
    if settings.internet == "all":
        egress.append(internet_rule(settings))
    if net.cluster_egress:
        key, value = net.control_plane
        egress.append({"to": [{"namespaceSelector": {"matchExpressions": [
            {"key": key, "operator": "NotIn", "values": [value]},
            {"key": MANAGED_BY[0], "operator": "NotIn", "values": [MANAGED_BY[1]]}]}}]})
    build_egress = [internet_rule(settings)] if settings.internet in ("all", "build") else []
    build_egress += registry_rules(settings)
    return [
        _policy(ISOLATION, ns, labels, {}, ["Ingress", "Egress"], ingress=[], egress=egress),
        _policy(BUILD_EGRESS, ns, labels, {"matchLabels": {"paddlecloud/role": "build"}}, ["Egress"],
                egress=build_egress),
    ]


def registry_rules(settings: K8sSettings) -> list[Obj]:
    """The build's way to a registry that is not on the internet: a private network (which the
    internet rule leaves out) or a namespace of the cluster, on any port."""
    b, out = settings.build, []
    if b.registry_cidrs:
        out.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in b.registry_cidrs]})
    if b.registry_namespace:
        peer: Obj = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME: b.registry_namespace}}}
        if b.registry_pod_labels:
            peer["podSelector"] = {"matchLabels": dict(b.registry_pod_labels)}
        out.append({"to": [peer]})
    return out


def job_policy(name: str, ns: str, job_labels: dict[str, str], selector: dict[str, str], owner: Obj | None) -> Obj:
    """`selector` picks exactly this job's pods; they may reach each other on any port."""
    peers = [{"podSelector": {"matchLabels": dict(selector)}}]
    return _policy(name, ns, job_labels, {"matchLabels": dict(selector)}, ["Ingress", "Egress"],
                   ingress=[{"from": peers}], egress=[{"to": peers}], owner=owner)
