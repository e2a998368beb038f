"""A Kubernetes datacenter's settings: `Datacenter.config` parsed, checked and defaulted.

Operators edit `config` (JSON) in the admin; `parse()` turns it into a frozen `K8sSettings` or
raises `SettingsError` with a message naming the bad key, so a typo is caught when the
datacenter is saved rather than when a user's job starts. Every key is optional:

    namespace_prefix   "paddle-"        user namespaces are <prefix><user>-<hash>
    context            ""               kubeconfig context to use (default: its current one)
    image / gpu_image  paddle 2.6.2     default images for CPU and GPU jobs
    image_pull_policy  "IfNotPresent"
    storage            {"kind": "hostPath", "path": "/mnt/paddlecloud-pfs"}; kinds: hostPath
                       (path), pvc (claim_name), cephfs (monitors_addr, user, secret_name, path;
                       seed 002), nfs (server, path); all take sub_path (the PFS root inside the
                       volume) and mount_path (where /pfs is in the pod, default "/pfs")
    secrets_namespace  ""               the service's own namespace: storage.secret_name is copied
                                        from here into user namespaces; build.push_secret and
                                        build.pull_secret are read from here (never copied whole)
    node_selector, tolerations, gpu_node_selector, gpu_tolerations, priority_class_name
    pending_timeout    600              seconds a replica may stay Pending before the job fails
    disk_limit         "10Gi"           node disk (ephemeral-storage) each pod may use: its working copy,
                                        $HOME, /tmp and logs (not PFS); requested and limited on every
                                        container: a pod over it is evicted and fails its job (DiskLimit)
    pserver_port 7164, trainer_port 8500, cluster_domain "" (e.g. "cluster.local" for FQDNs)
    build              {"enabled": false, "registry": "", "kaniko_image": ..., "push_image": crane,
                        "push_secret": "", "pull_secret": "", "cpu": "1", "memory": "2Gi", "disk_limit": "",
                        "registry_cidrs": [], "registry_namespace": "", "registry_pod_labels": {}}
                        runtime images from requirements.txt (disk_limit: the build pod's, "": the
                        datacenter's; kaniko unpacks the base image in it; runtime.py says how the push
                        credentials are kept from the build's user code); pull_secret: read-only
                        credentials pods pull runtime images with (none: they pull without any;
                        the push credentials never reach a job's pods; builds never get it: it
                        reads every user's runtime images); a registry that is not on
                        the internet is reached by builds through registry_cidrs (a private
                        network) or registry_namespace (+ registry_pod_labels: one in the cluster)
    run_as_user 10001, run_as_group 10001   uid/gid of every training pod (runAsNonRoot); set
                        run_as_user to the uid the service runs as on the shared PFS, so each can
                        manage what the other writes; 0 runs as the image's user (root: weaker)
    network            NetworkPolicies in user namespaces (hardening.py):
        internet        "all" | "build" | "none"; default "all" without build.enabled (pods
                        pip install at start), "build" with it (only the image build reaches out)
        internet_except private, link-local (cloud metadata) and loopback ranges: never "internet"
        cluster_egress  false: true lets pods reach other namespaces' pods (e.g. a package mirror),
                        except the control plane and other users' namespaces
        control_plane_label "paddlecloud.org/control-plane=true": marks the service's namespace
        dns_namespace "kube-system", dns_pod_labels {"k8s-app": "kube-dns"}: where DNS may go
    gang_scheduler     "none"           "volcano": a PodGroup per job (minMember = every replica) and
                                        schedulerName volcano on its pods; "kueue": every job is one
                                        JobSet (the JobSet controller 0.8+ must be installed),
                                        created suspended for a Kueue LocalQueue to admit whole.
                                        Either way a job never half-starts. Checked against the
                                        cluster when the datacenter is saved (discovery.py)
    volcano_queue      ""               the Volcano Queue of the PodGroups ("": Volcano's default)
    kueue_queue        ""               the LocalQueue (in every user namespace) with gang_scheduler kueue
    watch_timeout 300, resync_seconds 600, api_timeout 30, api_retries 5
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accounts.models import Datacenter

DEFAULT_IMAGE = "paddlepaddle/paddle:2.6.2"
DEFAULT_GPU_IMAGE = "paddlepaddle/paddle:2.6.2-gpu-cuda12.0-cudnn8.9-trt8.6"
DEFAULT_KANIKO = "gcr.io/kaniko-project/executor:v1.23.2"
DEFAULT_CRANE = "gcr.io/go-containerregistry/crane:v0.20.6"
INTERNET_MODES = ("all", "build", "none")
GANG_SCHEDULERS = ("none", "volcano", "kueue")
DEFAULT_DISK_LIMIT = "10Gi"  # as a local datacenter's (jobs/backends/local/config.py)
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8")
PRIVATE_RANGES_V6 = ("fc00::/7", "fe80::/10", "::1/128")
STORAGE_KINDS = ("hostPath", "pvc", "cephfs", "nfs")
_PREFIX = re.compile(r"^[a-z]([-a-z0-9]{0,18})$")
_SUB_PATH = re.compile(r"^[A-Za-z0-9._/-]*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class SettingsError(ValueError):
    """A bad `Datacenter.config` for the kubernetes backend; the message names the key."""


@dataclass(frozen=True)
class Storage:
    kind: str = "hostPath"
    path: str = "/mnt/paddlecloud-pfs"  # hostPath dir, CephFS path, or NFS export
    claim_name: str = "paddlecloud-pfs"
    server: str = ""
    monitors_addr: str = ""
    user: str = "admin"
    secret_name: str = "cephfs-secret"
    sub_path: str = ""
    mount_path: str = "/pfs"


@dataclass(frozen=True)
class Build:
    enabled: bool = False
    registry: str = ""  # e.g. registry.example.com/paddlecloud: runtime images are pushed here
    kaniko_image: str = DEFAULT_KANIKO
    push_image: str = DEFAULT_CRANE
    push_secret: str = ""  # a kubernetes.io/dockerconfigjson Secret in secrets_namespace
    pull_secret: str = ""  # the same, read-only; none: pods pull runtime images without credentials
    cpu: str = "1"
    memory: str = "2Gi"
    disk_limit: str = ""  # "": the datacenter's disk_limit
    # Where the registry is when it is not on the internet: builds may reach these (NetworkPolicy).
    registry_cidrs: tuple[str, ...] = ()
    registry_namespace: str = ""  # a registry in the cluster: its namespace ...
    registry_pod_labels: dict[str, str] = field(default_factory=dict)  # ... and its pods' labels (none: all)


@dataclass(frozen=True)
class Network:
    internet: str = ""  # "" = by build.enabled, see K8sSettings.internet
    internet_except: tuple[str, ...] = PRIVATE_RANGES + PRIVATE_RANGES_V6
    cluster_egress: bool = False
    control_plane_label: str = "paddlecloud.org/control-plane=true"
    dns_namespace: str = "kube-system"
    dns_pod_labels: dict[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})

    @property
    def control_plane(self) -> tuple[str, str]:
        key, _, value = self.control_plane_label.partition("=")
        return key, value


@dataclass(frozen=True)
class K8sSettings:
    datacenter: str
    namespace_prefix: str = "paddle-"
    context: str = ""
    image: str = DEFAULT_IMAGE
    gpu_image: str = DEFAULT_GPU_IMAGE
    image_pull_policy: str = "IfNotPresent"
    storage: Storage = field(default_factory=Storage)
    secrets_namespace: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    gpu_node_selector: dict[str, str] = field(default_factory=dict)
    gpu_tolerations: list[dict[str, Any]] = field(default_factory=list)
    priority_class_name: str = ""
    pending_timeout: int = 600
    disk_limit: str = DEFAULT_DISK_LIMIT
    pserver_port: int = 7164
    trainer_port: int = 8500
    cluster_domain: str = ""
    build: Build = field(default_factory=Build)
    gang_scheduler: str = "none"
    volcano_queue: str = ""
    kueue_queue: str = ""
    run_as_user: int = 10001
    run_as_group: int = 10001
    network: Network = field(default_factory=Network)
    watch_timeout: int = 300
    resync_seconds: int = 600
    api_timeout: int = 30
    api_retries: int = 5

    def namespace(self, username: str) -> str:
        return user_namespace(self.namespace_prefix, username)

    def service_domain(self, namespace: str) -> str:
        """The DNS suffix of a Service in `namespace` (short form unless cluster_domain is set)."""
        return f"{namespace}.svc.{self.cluster_domain}" if self.cluster_domain else f"{namespace}.svc"

    @property
    def internet(self) -> str:
        """Who may reach the internet: a runtime image carries the requirements, so with builds
        only the build needs the package index; without, every pod pip installs at start."""
        return self.network.internet or ("build" if self.build.enabled else "all")

    @property
    def build_disk_limit(self) -> str:
        return self.build.disk_limit or self.disk_limit


def sanitize(text: str, limit: int) -> str:
    """Lowercase DNS-label characters only, no leading/trailing '-', at most `limit` long."""
    out = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return out[:limit].rstrip("-")


def user_namespace(prefix: str, username: str) -> str:
    """`<prefix><sanitized user>-<hash>`: readable, DNS-safe, and collision-proof because the
    hash is of the exact username (so "a.b" and "a-b" differ even though both sanitize alike)."""
    digest = hashlib.sha256(username.encode()).hexdigest()[:8]
    room = 63 - len(prefix) - len(digest) - 1
    name = sanitize(username, room)
    return f"{prefix}{name}-{digest}" if name else f"{prefix}{digest}"


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise SettingsError(message)


def _dict_of_str(value: Any, key: str) -> dict[str, str]:
    _check(isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()),
           f"{key}: a mapping of label names to string values")
    return dict(value)


def _list_of_dict(value: Any, key: str) -> list[dict[str, Any]]:
    _check(isinstance(value, list) and all(isinstance(v, dict) for v in value), f"{key}: a list of objects")
    return list(value)


def _int(value: Any, key: str, low: int, high: int) -> int:
    _check(isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
           f"{key}: a whole number from {low} to {high}")
    number: int = value
    return number


def _str(value: Any, key: str) -> str:
    _check(isinstance(value, str), f"{key}: text")
    text: str = value
    return text.strip()


def _disk(value: Any, key: str) -> str:
    """An ephemeral-storage quantity from 1Mi to 1Pi (or a number of bytes, as a local datacenter's)."""
    from quotas.units import quantity

    text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    try:
        amount = quantity(text)
    except ValueError:
        amount = None
    _check(amount is not None and 1 << 20 <= amount <= 1 << 50, f'{key}: a quantity from 1Mi to 1Pi, e.g. "20Gi"')
    return text


def _parse_storage(raw: Any) -> Storage:
    _check(isinstance(raw, dict), "storage: an object with a 'kind'")
    known = set(Storage.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    _check(not unknown, f"storage: unknown keys {unknown}; known: {sorted(known)}")
    values = {k: _str(v, f"storage.{k}") for k, v in raw.items()}
    st = Storage(**values)
    _check(st.kind in STORAGE_KINDS, f"storage.kind: one of {', '.join(STORAGE_KINDS)}")
    _check(_SUB_PATH.match(st.sub_path) is not None and ".." not in st.sub_path.split("/"),
           "storage.sub_path: a relative path without '..'")
    _check(st.mount_path.startswith("/") and ".." not in st.mount_path.split("/"),
           "storage.mount_path: an absolute path")
    if st.kind == "hostPath":
        _check(st.path.startswith("/"), "storage.path: the absolute host directory of the PFS root")
    elif st.kind == "pvc":
        _check(bool(st.claim_name), "storage.claim_name: the PersistentVolumeClaim in each user namespace")
    elif st.kind == "cephfs":
        _check(bool(st.monitors_addr), "storage.monitors_addr: the Ceph monitors, e.g. 10.0.0.1:6789,10.0.0.2:6789")
        _check(bool(st.secret_name), "storage.secret_name: the Secret holding the Ceph key")
    elif st.kind == "nfs":
        _check(bool(st.server) and st.path.startswith("/"), "storage: nfs needs server and an absolute path")
    return st


def _build_value(key: str, value: Any) -> Any:
    if key == "enabled":
        return bool(value)
    if key == "registry_cidrs":
        _check(isinstance(value, list) and all(isinstance(c, str) and _is_cidr(c) for c in value),
               "build.registry_cidrs: a list of CIDRs, e.g. [\"10.20.0.0/24\"]")
        return tuple(value)
    if key == "registry_pod_labels":
        return _dict_of_str(value, "build.registry_pod_labels")
    if key == "disk_limit":
        return _disk(value, "build.disk_limit") if value != "" else ""
    return _str(value, f"build.{key}")


def _parse_build(raw: Any) -> Build:
    _check(isinstance(raw, dict), "build: an object")
    known = set(Build.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    _check(not unknown, f"build: unknown keys {unknown}; known: {sorted(known)}")
    b = Build(**{k: _build_value(k, v) for k, v in raw.items()})
    if b.enabled:
        _check(bool(b.registry), "build.registry: where runtime images go, e.g. registry.example.com/paddlecloud")
    _check(not b.registry_namespace or DNS_LABEL.match(b.registry_namespace) is not None,
           "build.registry_namespace: the namespace of a registry in the cluster")
    _check(not b.registry_pod_labels or bool(b.registry_namespace),
           "build.registry_pod_labels: only with build.registry_namespace")
    return b


def _parse_network(raw: Any) -> Network:
    _check(isinstance(raw, dict), "network: an object")
    known = set(Network.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    _check(not unknown, f"network: unknown keys {unknown}; known: {sorted(known)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "internet":
            _check(value in INTERNET_MODES, f"network.internet: one of {', '.join(INTERNET_MODES)}")
            out[key] = value
        elif key == "internet_except":
            _check(isinstance(value, list), "network.internet_except: a list of CIDRs")
            for cidr in value:
                _check(isinstance(cidr, str) and _is_cidr(cidr), f"network.internet_except: {cidr!r} is not a CIDR")
            out[key] = tuple(value)
        elif key == "cluster_egress":
            _check(isinstance(value, bool), "network.cluster_egress: true or false")
            out[key] = value
        elif key == "dns_pod_labels":
            out[key] = _dict_of_str(value, "network.dns_pod_labels")
        else:
            out[key] = _str(value, f"network.{key}")
    net = Network(**out)
    key, value = net.control_plane
    _check(bool(key) and bool(value) and _LABEL.match(key) is not None,
           "network.control_plane_label: key=value, e.g. paddlecloud.org/control-plane=true")
    _check(bool(net.dns_namespace), "network.dns_namespace: the namespace of the cluster DNS")
    return net


def _is_cidr(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_network(text)
    except ValueError:
        return False
    return "/" in text


def parse(datacenter_name: str, config: dict[str, Any] | None) -> K8sSettings:
    config = dict(config or {})
    _check("kubeflow" not in config, "kubeflow: no longer supported: the training operator's PaddleJob "
                                     "(kubeflow.org/v1, superseded by Kubeflow Trainer) made the same pods the "
                                     "default layout makes; remove the key")
    known = set(K8sSettings.__dataclass_fields__) - {"datacenter"}
    unknown = sorted(set(config) - known)
    _check(not unknown, f"unknown keys {unknown}; known: {sorted(known)}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "storage":
            out[key] = _parse_storage(value)
        elif key == "build":
            out[key] = _parse_build(value)
        elif key == "network":
            out[key] = _parse_network(value)
        elif key in ("run_as_user", "run_as_group"):
            out[key] = _int(value, key, 0, 2**31 - 1)
        elif key in ("node_selector", "gpu_node_selector"):
            out[key] = _dict_of_str(value, key)
        elif key in ("tolerations", "gpu_tolerations"):
            out[key] = _list_of_dict(value, key)
        elif key in ("pserver_port", "trainer_port"):
            out[key] = _int(value, key, 1, 65535)
        elif key in ("pending_timeout", "watch_timeout", "resync_seconds", "api_timeout"):
            out[key] = _int(value, key, 1, 7 * 24 * 3600)
        elif key == "api_retries":
            out[key] = _int(value, key, 1, 20)
        elif key == "disk_limit":
            out[key] = _disk(value, key)
        else:
            out[key] = _str(value, key)
    settings = K8sSettings(datacenter=datacenter_name, **out)
    _check(_PREFIX.match(settings.namespace_prefix.rstrip("-")) is not None and settings.namespace_prefix.endswith("-"),
           "namespace_prefix: up to 20 lowercase letters, digits and '-', starting with a letter and ending with '-'")
    _check(settings.image_pull_policy in ("Always", "IfNotPresent", "Never"),
           "image_pull_policy: Always, IfNotPresent or Never")
    _check(settings.pserver_port != settings.trainer_port, "pserver_port and trainer_port must differ")
    _check_gang(settings)
    return settings


def _check_gang(settings: K8sSettings) -> None:
    gang = settings.gang_scheduler
    _check(gang in GANG_SCHEDULERS, f"gang_scheduler: one of {', '.join(GANG_SCHEDULERS)}")
    if gang == "kueue":
        _check(DNS_LABEL.match(settings.kueue_queue) is not None,
               "kueue_queue: the name of the Kueue LocalQueue that admits the jobs (in every user namespace)")
    else:
        _check(not settings.kueue_queue, "kueue_queue: only with gang_scheduler kueue")
    if gang == "volcano":
        _check(not settings.volcano_queue or DNS_LABEL.match(settings.volcano_queue) is not None,
               "volcano_queue: the name of a Volcano Queue")
    else:
        _check(not settings.volcano_queue, "volcano_queue: only with gang_scheduler volcano")


def for_datacenter(datacenter: Datacenter) -> K8sSettings:
    return parse(datacenter.name, datacenter.config)
