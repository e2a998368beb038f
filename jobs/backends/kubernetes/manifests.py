"""Every Kubernetes object the kubernetes backend creates, as plain dicts. Pure functions: no
API calls, no database, no clock, so each can be validated against the OpenAPI schemas.

One job in its user's namespace is (`<job>` is its k8s_name: a DNS label made from the name the
user typed, see jobs/spec.py; the typed name is in the root ConfigMap's job.json):
- a root ConfigMap `<job>` that owns everything else (deleting it cascades: no orphans),
- `<job>-pull`, a dockerconfigjson Secret with the job's registry credentials (if any),
- pservers: StatefulSet `<job>-pserver` + headless Service of the same name, so pserver i is
  `<job>-pserver-<i>.<job>-pserver.<ns>.svc` before it starts; a TCP readiness probe on its port,
- trainers: Indexed Job `<job>-trainer` (index = trainer id) + headless Service for their names
  (`<job>-trainer-<i>.<job>-trainer.<ns>.svc`; rank 0 is the collective master); a failed index is
  retried by the Job itself (backoffLimitPerIndex, podFailurePolicy: the job's restart policy),
- with a gang scheduler (gang.py): the attempt's Volcano PodGroup `<job>-gang`; under Kueue a
  job is instead one JobSet `<job>` (layouts/jobset.py: replicated jobs `pserver` and `trainer`,
  each one Indexed Job `<job>-<role>-0`): pod i is `<job>-<role>-0-<i>.<job>.<ns>.svc` through the
  headless Service the JobSet controller makes, so the backend makes no Service of its own for it,
- `<job>-peers`, the NetworkPolicy that lets the job's pods (and only they) reach each other,
- optionally the runtime image build Job `<job>-build` (kaniko), see runtime.py.

Workloads, their Services and pods belong to one attempt of the job (Replica.attempt): attempt 0
has the names above, attempt n > 0 the suffix `-a<n in base 36>` after the role (`<job>-pserver-a1`),
so a gang restart or a resume makes fresh objects whose pods are never mistaken for the old ones'.

The workloads themselves (StatefulSet, Job, JobSet) are built in workloads.py from the pieces
here, for the layout (layouts/) that says which of them a job is and where its pods are (Hosts).
Every pod is hardened by hardening.py (non-root, no capabilities, seccomp).

A pod template is shared by every index, so per-index values of the process contract come from
the pod itself (downward API) through Kubernetes' `$(VAR)` expansion; everything literal is
escaped so `$(...)` in a user's entry point or env reaches the program unchanged.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import contract
from . import hardening as k8s_hardening
from .config import K8sSettings, sanitize

if TYPE_CHECKING:
    from ...models import Job

LABEL_JOB = "paddlecloud/job"
LABEL_JOB_ID = "paddlecloud/job-id"
LABEL_ROLE = "paddlecloud/role"
LABEL_INDEX = "paddlecloud/index"
LABEL_ATTEMPT = "paddlecloud/attempt"
LABEL_DATACENTER = "paddlecloud/datacenter"
LABEL_USER = "paddlecloud/user"
ANNOTATION_USERNAME = "paddlecloud/username"
MANAGED_BY = {"app.kubernetes.io/managed-by": "paddlecloud"}
CONTAINER = "paddle"
WORKSPACE = "/workspace"
# A writable HOME for a non-root uid the image does not know (pip's user installs go there).
HOME = "/home/paddlecloud"
PACKAGE_MOUNT = "/paddlecloud/package"
# Where Kubernetes puts an Indexed Job pod's index (1.21+).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

Obj = dict[str, Any]


# --- names and labels --------------------------------------------------------------------------
def root_name(job: Job) -> str:
    return job.k8s_name


def attempt_suffix(attempt: int) -> str:
    """Base 36 keeps the longest names within the 63 characters of a label value."""
    digits, n = "", attempt
    while n:
        n, d = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + digits
    return f"-a{digits}" if attempt else ""


# A StatefulSet's pods carry the label controller-revision-hash "<its name>-<hash of up to 10>".
STATEFULSET_NAME_MAX = 63 - 11


def within(name: str, limit: int) -> str:
    """`name`, or where it is longer than `limit`, its start and a hash of the whole (still its own)."""
    if len(name) <= limit:
        return name
    return f"{name[:limit - 9].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def pserver_name(job: Job, attempt: int = 0) -> str:
    """The pservers' StatefulSet; from attempt 1296 of the longest job names, cut and hashed to fit."""
    return within(f"{job.k8s_name}-pserver{attempt_suffix(attempt)}", STATEFULSET_NAME_MAX)


def trainer_name(job: Job, attempt: int = 0) -> str:
    return f"{job.k8s_name}-trainer{attempt_suffix(attempt)}"


def jobset_name(job: Job, attempt: int = 0) -> str:
    """The JobSet of a pserver job under Kueue; also its pods' DNS subdomain (its Service)."""
    return f"{job.k8s_name}{attempt_suffix(attempt)}"


def jobset_job_name(job: Job, role: str, attempt: int = 0) -> str:
    """The JobSet controller's name for the (only) Job of replicated job `role`."""
    return f"{jobset_name(job, attempt)}-{role}-0"


def podgroup_name(job: Job, attempt: int = 0) -> str:
    return f"{job.k8s_name}-gang{attempt_suffix(attempt)}"


def pull_secret_name(job: Job) -> str:
    return f"{job.k8s_name}-pull"


def labels(job: Job, role: str | None = None, index: int | None = None, attempt: int | None = None) -> dict[str, str]:
    out = {LABEL_JOB: job.k8s_name, LABEL_JOB_ID: str(job.pk), LABEL_DATACENTER: job.datacenter.name,
           LABEL_USER: sanitize(job.user.get_username(), 63) or "user", **MANAGED_BY}
    if role:
        out[LABEL_ROLE] = role
    if index is not None:
        out[LABEL_INDEX] = str(index)
    if attempt is not None:
        out[LABEL_ATTEMPT] = str(attempt)
    return out


def object_meta(name: str, namespace: str | None, lbls: dict[str, str], owner: Obj | None = None, **extra: Any) -> Obj:
    meta: Obj = {"name": name, "labels": dict(lbls)}
    if namespace:
        meta["namespace"] = namespace
    if owner:
        meta["ownerReferences"] = [owner]
    meta.update(extra)
    return meta


def owner_reference(root: Obj) -> Obj:
    """Points a child at the job's root ConfigMap; blockOwnerDeletion makes a foreground delete
    of the root wait until every child is gone, so "deleted" really means gone."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": root["metadata"]["name"],
            "uid": root["metadata"]["uid"], "blockOwnerDeletion": True}


def escape(value: str) -> str:
    """Kubernetes expands `$(VAR)` in env values, command and args; `$$` is a literal `$`."""
    return value.replace("$", "$$")


# --- per-user objects --------------------------------------------------------------------------
def namespace(settings: K8sSettings, username: str) -> Obj:
    lbls = {LABEL_DATACENTER: settings.datacenter, LABEL_USER: sanitize(username, 63) or "user", **MANAGED_BY}
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": object_meta(settings.namespace(username), None, lbls,
                                    annotations={ANNOTATION_USERNAME: username})}


def resource_quota(ns: str, *, cpu_millicores: int, memory_bytes: int, gpus: int) -> Obj:
    """Mirrors the user's PaddleCloud quota, so the cluster enforces it too (requests = limits
    on every container we make, so both are bounded alike)."""
    cpu, mem = f"{cpu_millicores}m", str(memory_bytes)
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": object_meta("paddlecloud-quota", ns, MANAGED_BY),
            "spec": {"hard": {"requests.cpu": cpu, "limits.cpu": cpu, "requests.memory": mem, "limits.memory": mem,
                              "requests.nvidia.com/gpu": str(gpus)}}}


def copied_secret(source: Obj, ns: str) -> Obj:
    """A Secret from the service's namespace (Ceph key, registry push credentials) for `ns`."""
    return {"apiVersion": "v1", "kind": "Secret", "type": source.get("type") or "Opaque",
            "metadata": object_meta(source["metadata"]["name"], ns, MANAGED_BY), "data": dict(source.get("data") or {})}


def dockerconfig_secret(name: str, ns: str, auths: dict[str, Obj], lbls: dict[str, str], owner: Obj | None) -> Obj:
    """`auths` maps a registry server to {"username", "password", "auth"} (see docker_auth)."""
    payload = json.dumps({"auths": auths}, sort_keys=True)
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": object_meta(name, ns, lbls, owner), "stringData": {".dockerconfigjson": payload}}


def docker_auth(username: str, password: str) -> Obj:
    import base64

    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"username": username, "password": password, "auth": token}


# --- per-job objects ---------------------------------------------------------------------------
def root(job: Job, ns: str) -> Obj:
    summary = {"name": job.name, "mode": job.mode, "pservers": job.pservers, "trainers": job.trainers,
               "entry": job.entry, "package": job.package, "user": job.user.get_username()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(root_name(job), ns, labels(job)),
            "data": {"job.json": json.dumps(summary, sort_keys=True)}}


@dataclass(frozen=True)
class Hosts:
    """Where a layout's pods are found: host name patterns of pservers and trainers ({i} = the
    index); `named_pservers` when a pserver pod's own name is its host name (a StatefulSet's)."""

    pserver: str
    trainer: str
    named_pservers: bool = False


def topology(job: Job, settings: K8sSettings, hosts: Hosts) -> contract.Topology:
    """Every replica's stable DNS endpoint in an attempt, known before any pod exists."""
    return contract.Topology(
        pservers=[f"{hosts.pserver.format(i=i)}:{settings.pserver_port}" for i in range(job.pservers)],
        trainers=[f"{hosts.trainer.format(i=i)}:{settings.trainer_port}" for i in range(job.trainers)],
    )


def headless_service(job: Job, ns: str, role: str, port: int, owner: Obj | None, attempt: int = 0) -> Obj:
    name = pserver_name(job, attempt) if role == "pserver" else trainer_name(job, attempt)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": object_meta(name, ns, labels(job, role, attempt=attempt), owner),
            "spec": {"clusterIP": "None",
                     # A replica resolves its own name to bind its port before it is ready.
                     "publishNotReadyAddresses": True,
                     "selector": {LABEL_JOB_ID: str(job.pk), LABEL_ROLE: role, LABEL_ATTEMPT: str(attempt)},
                     "ports": [{"name": role, "port": port, "targetPort": port, "protocol": "TCP"}]}}


def pfs_mounts(job: Job, settings: K8sSettings) -> tuple[Obj, list[Obj]]:
    """The PFS volume and its mounts: the user's home read-write at <mount>/<dc>/home/<user>,
    the datacenter's public area read-only, and the job's package snapshot read-only."""
    st = settings.storage
    if st.kind == "hostPath":
        volume: Obj = {"name": "pfs", "hostPath": {"path": st.path, "type": "Directory"}}
    elif st.kind == "pvc":
        volume = {"name": "pfs", "persistentVolumeClaim": {"claimName": st.claim_name}}
    elif st.kind == "cephfs":
        volume = {"name": "pfs", "cephfs": {"monitors": [m.strip() for m in st.monitors_addr.split(",") if m.strip()],
                                            "path": st.path or "/", "user": st.user,
                                            "secretRef": {"name": st.secret_name}}}
    else:
        volume = {"name": "pfs", "nfs": {"server": st.server, "path": st.path}}
    base = "/".join(p for p in (st.sub_path.strip("/"), settings.datacenter) if p)
    user = job.user.get_username()
    mounts: list[Obj] = [
        {"name": "pfs", "mountPath": pfs_home(job, settings), "subPath": f"{base}/home/{user}"},
        {"name": "pfs", "mountPath": f"{st.mount_path.rstrip('/')}/{settings.datacenter}/public",
         "subPath": f"{base}/public", "readOnly": True},
        {"name": "pfs", "mountPath": PACKAGE_MOUNT, "subPath": f"{base}/{snapshot_dir(job)}/package", "readOnly": True},
    ]
    return volume, mounts


def pfs_home(job: Job, settings: K8sSettings) -> str:
    return f"{settings.storage.mount_path.rstrip('/')}/{settings.datacenter}/home/{job.user.get_username()}"


def snapshot_dir(job: Job) -> str:
    """Where, relative to the datacenter's PFS root, the server keeps the job's package copy."""
    return f".paddlecloud/jobs/{job.pk}"


def resources(cpu: str, memory: str, gpu: int = 0, disk: str = "") -> Obj:
    """Requests = limits. `disk` (ephemeral-storage): a pod writing more to its node's disk (its
    containers' layers and logs, its emptyDirs) than its containers' limits together is evicted."""
    amounts = {"cpu": cpu, "memory": memory}
    if gpu:
        amounts["nvidia.com/gpu"] = str(gpu)
    if disk:
        amounts["ephemeral-storage"] = disk
    return {"requests": dict(amounts), "limits": dict(amounts)}


def image_for(job: Job, settings: K8sSettings) -> str:
    return job.image or (settings.gpu_image if job.gpu else settings.image)


# The entry point runs under this. Paddle binds to POD_IP, a DNS name that resolves only once
# the headless Service has published this pod, so wait for it (a bind failure would restart a
# pserver, which fails the job); then dependencies from requirements.txt unless the image
# already has them (a runtime image); then exec, so the program gets the signals.
RUN_SCRIPT = (
    'i=0\n'
    'while [ -n "$POD_IP" ] && ! getent hosts "$POD_IP" >/dev/null 2>&1 && [ "$i" -lt 120 ]; do'
    ' i=$((i + 1)); sleep 1; done\n'
    'if [ -f requirements.txt ] && [ "${PADDLECLOUD_RUNTIME_READY:-0}" != 1 ]; then\n'
    '  python -m pip install --no-cache-dir --disable-pip-version-check -r requirements.txt'
    ' || { echo "paddlecloud: pip install -r requirements.txt failed" >&2; exit 97; }\n'
    'fi\n'
    'exec "$@"\n'
)


def _env(values: dict[str, str], field_refs: dict[str, str], templated: dict[str, str]) -> list[Obj]:
    """Downward-API vars first, then literals (escaped), then `$(VAR)` templates, in the order
    given: Kubernetes only expands references to variables defined earlier in the list."""
    out: list[Obj] = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in field_refs.items()]
    out += [{"name": k, "value": escape(v)} for k, v in values.items() if k not in templated]
    out += [{"name": k, "value": v} for k, v in templated.items()]
    return out


def replica_env(job: Job, settings: K8sSettings, role: str, hosts: Hosts, *, runtime_ready: bool) -> list[Obj]:
    """The process contract for every pod of `role`: contract.replica_env for index 0, with
    the per-index values replaced by expressions of the pod's own index or name."""
    topo = topology(job, settings, hosts)
    base = {"PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8", "HOME": HOME,
            "PADDLECLOUD_RUNTIME_READY": "1" if runtime_ready else "0",
            **job.env,
            **contract.replica_env(job, role, 0, topo, pfs_home=pfs_home(job, settings), package=job.package)}
    if role == "pserver" and hosts.named_pservers:
        # A StatefulSet's pod names are their host names: <name>-<i>.
        refs = {"PADDLECLOUD_POD_NAME": "metadata.name"}
        suffix = hosts.pserver.split(".", 1)[1]
        return _env(base, refs, {"POD_IP": f"$(PADDLECLOUD_POD_NAME).{suffix}"})
    # Indexed Job pods are named <job>-<i>-<random>: their index names them.
    index_field = f"metadata.annotations['{COMPLETION_INDEX}']"
    templated = {"POD_IP": (hosts.pserver if role == "pserver" else hosts.trainer).format(i="$(PADDLECLOUD_INDEX)")}
    for key in ("PADDLE_TRAINER_ID", "TRAINER_ID", "PADDLE_INIT_TRAINER_ID"):
        if key in base:
            templated[key] = "$(PADDLECLOUD_INDEX)"
    if "PADDLE_CURRENT_ENDPOINT" in base:
        templated["PADDLE_CURRENT_ENDPOINT"] = "$(POD_IP):$(PADDLE_PORT)"
    return _env(base, {"PADDLECLOUD_INDEX": index_field}, templated)


def pod_spec(job: Job, settings: K8sSettings, role: str, *, image: str, env: list[Obj], port: int,
             restart_policy: str, pull_secrets: list[str], grace_seconds: int) -> Obj:
    pfs_volume, pfs_mount_list = pfs_mounts(job, settings)
    gpu = job.gpu if role == "trainer" else 0
    disk = settings.disk_limit  # the init container's too: the pod's limit stays disk_limit, not twice it
    res = resources(job.cpu, job.memory, gpu, disk) if role == "trainer" else resources(job.pscpu, job.psmemory,
                                                                                      disk=disk)
    init_script = f"set -e\ncp -R {PACKAGE_MOUNT}/. {WORKSPACE}/\n"
    mounts = [{"name": "workspace", "mountPath": WORKSPACE}, {"name": "home", "mountPath": HOME}, *pfs_mount_list]
    init_env = [e for e in env if e["name"] in ("PADDLECLOUD_INDEX", "PADDLE_TRAINERS_NUM")]
    if role == "trainer":
        # Seed 004: programs read /trainer_id and /trainer_count (locally: the working dir).
        init_script += ('printf "%s\\n" "$PADDLECLOUD_INDEX" > /workspace/trainer_id\n'
                        'printf "%s\\n" "$PADDLE_TRAINERS_NUM" > /workspace/trainer_count\n')
        mounts += [{"name": "workspace", "mountPath": f"/{f}", "subPath": f, "readOnly": True}
                   for f in ("trainer_id", "trainer_count")]
    argv = shlex.split(job.entry)
    container: Obj = {
        "name": CONTAINER, "image": image, "imagePullPolicy": settings.image_pull_policy,
        "command": ["/bin/sh", "-c", escape(RUN_SCRIPT), "paddlecloud-run"], "args": [escape(a) for a in argv],
        "workingDir": WORKSPACE, "env": env, "resources": res, "volumeMounts": mounts,
        "ports": [{"name": role, "containerPort": port, "protocol": "TCP"}],
    }
    if role == "pserver":
        container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 5, "failureThreshold": 3}
    spec: Obj = {
        "restartPolicy": restart_policy,
        # Training code needs no API access, and service env vars would only add noise.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_seconds,
        "initContainers": [{
            "name": "package", "image": image, "imagePullPolicy": settings.image_pull_policy,
            "command": ["/bin/sh", "-c", escape(init_script)], "env": init_env, "resources": res,
            "volumeMounts": [{"name": "workspace", "mountPath": WORKSPACE}, pfs_mount_list[-1]],
        }],
        "containers": [container],
        "volumes": [{"name": "workspace", "emptyDir": {}}, {"name": "home", "emptyDir": {}}, pfs_volume],
    }
    k8s_hardening.harden(spec, settings)
    node_selector = {**settings.node_selector, **(settings.gpu_node_selector if gpu else {})}
    tolerations = settings.tolerations + (settings.gpu_tolerations if gpu else [])
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if settings.priority_class_name:
        spec["priorityClassName"] = settings.priority_class_name
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in pull_secrets]
    return spec


def network_policy(job: Job, ns: str, owner: Obj | None) -> Obj:
    """`<job>-peers`: the job's pods reach each other; the namespace's policies deny the rest."""
    selector = {LABEL_JOB: job.k8s_name, LABEL_JOB_ID: str(job.pk)}
    return k8s_hardening.job_policy(f"{job.k8s_name}-peers", ns, labels(job), selector, owner)
