"""Runtime images built in the cluster (seed 001): the base image plus the package's
requirements.txt, built by a kaniko Job and pushed to the datacenter's registry, so users never
need Docker. Optional per datacenter (`build.enabled`).

The image is named by a hash of the base image and the requirements, like the local backend's
cached virtualenvs, in a repository of the user's own (`<registry>/paddlecloud-runtime/<ns>`):
that user's jobs with the same requirements share it, and no other user's build can replace it.
A ConfigMap in the user's namespace records a successful build, so the next job skips it.

The build runs user code (pip runs setup scripts), and kaniko runs RUN steps in its own
filesystem, where they can read its /kaniko/.docker; so kaniko never gets the push credentials.
It builds into a tarball (--no-push) in an init container that holds only credentials to pull
the base image: the user's own registry's. Not the datacenter's read-only pull_secret, which
reads every user's runtime images (each built FROM that user's base image, perhaps a private
one): a build's setup script would read it there. Then a
second container, which runs no user code and shares only the tarball's emptyDir with it, pushes
the tarball to the one destination the server chose (crane). The push credentials are copied
for this build only into a Secret `<job>-push` mounted into that container alone, deleted as
soon as the build ends (and with the job's root if the job is killed). What is not protected
here: the push credentials are the datacenter's, so the registry must scope them (a robot
account that may push only to <registry>/paddlecloud-runtime); the remote layer cache is off
(it would need push credentials inside kaniko).

The build runs while the job is Building, and no worker waits for it: the launch task creates
its Secrets and Job (ensure_runtime_image) and returns. The watcher follows it on its passes
(BuildFollower, every POLL_SECONDS while it runs): kaniko's output is copied into the job's
`build` log as it comes (BuildLogCopy), and once the build ended its Secrets are deleted and, if
it succeeded, the marker is made. build_status() tells the lifecycle (jobs/lifecycle/preparing.py)
how it went: built, and the launch task runs again and starts the replicas; failed, and the job
fails with the build log's tail (RuntimeImageBuildFailed); Pending past the pending timeout, and
it fails with the pod's reason. A kill deletes the build with the job's root. Two jobs of one
user with the same requirements launched together both build (the same image, pushed twice):
waiting for another job's build would tie a job to one that may be killed, for a case that only
costs a second build.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.conf import settings as django_settings

from ...live import logstore
from ...models import Job, ReplicaState
from ..base import FAILED, PENDING, PREPARING, READY, LaunchError, Preparation
from . import hardening, manifests, root
from .client import Api
from .config import K8sSettings
from .context import ClusterContext
from .informer import JOB, ClusterState
from .pull import pull_secret_names, shared_auths
from .status import describe_exit, disk_eviction, meta, parse_time, pod_status, workload_finished
from .workloads import PodOptions

POLL_SECONDS = 2.0  # how often the watcher looks at the builds under way (their logs)
LOG_TAIL_LINES = 25
IMAGE_TAR = "/image/image.tar"
PUSH_AUTH = "/push-auth"
# `<job>-<suffix>`: made for one build, deleted when it ends. No suffix ends another object's
# ("-pull-build", not "-build-pull", which is the pull Secret of a job named `<job>-build`).
BUILD_SECRETS = ("pull-build", "push")
PUSH_USER = 65532  # the push container's uid: it needs no root and no capability
Obj = dict[str, Any]


def requirements_key(base_image: str, requirements: str) -> str:
    lines = sorted(line.strip() for line in requirements.splitlines() if line.strip() and not line.startswith("#"))
    return hashlib.sha256((base_image + "\n" + "\n".join(lines)).encode()).hexdigest()[:16]


def runtime_image_name(settings: K8sSettings, namespace: str, base_image: str, requirements: str) -> str:
    key = requirements_key(base_image, requirements)
    return f"{settings.build.registry.rstrip('/')}/paddlecloud-runtime/{namespace}:{key}"


def build_dockerfile(base_image: str) -> str:
    """The runtime image: the base image plus the package's requirements. The package itself
    is not baked in (pods copy it from PFS), so jobs with equal requirements share one image."""
    return (f"FROM {base_image}\n"
            "COPY requirements.txt /tmp/paddlecloud-requirements.txt\n"
            "RUN python -m pip install --no-cache-dir --disable-pip-version-check "
            "-r /tmp/paddlecloud-requirements.txt\n")


def _secret_volume(name: str, secret: str) -> Obj:
    items = [{"key": ".dockerconfigjson", "path": "config.json"}]
    return {"name": name, "secret": {"secretName": secret, "items": items}}


def build_job(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, *, destination: str,
              pull_auth: str | None, push_auth: str | None) -> Obj:
    """A Job building `destination` from the snapshot's Dockerfile and package: kaniko (init
    container, root, user code, no push credentials) writes a tarball that crane pushes."""
    pfs_volume, pfs_mount_list = manifests.pfs_mounts(job, settings)
    context = pfs_mount_list[-1]["subPath"].rsplit("/", 1)[0]  # the snapshot: Dockerfile and package/
    snapshot = {**pfs_mount_list[-1], "mountPath": "/context", "subPath": context}
    kaniko_mounts = [snapshot, {"name": "image", "mountPath": "/image"}]
    push_mounts = [{"name": "image", "mountPath": "/image", "readOnly": True}]
    volumes = [pfs_volume, {"name": "image", "emptyDir": {}}]
    if pull_auth:
        kaniko_mounts.append({"name": "pull-auth", "mountPath": "/kaniko/.docker", "readOnly": True})
        volumes.append(_secret_volume("pull-auth", pull_auth))
    if push_auth:
        push_mounts.append({"name": "push-auth", "mountPath": PUSH_AUTH, "readOnly": True})
        volumes.append(_secret_volume("push-auth", push_auth))
    b = settings.build
    kaniko = {"name": "kaniko", "image": b.kaniko_image, "imagePullPolicy": "IfNotPresent",
              "args": ["--dockerfile=/context/Dockerfile", "--context=dir:///context/package",
                       f"--destination={destination}", "--no-push", f"--tar-path={IMAGE_TAR}"],
              "resources": manifests.resources(b.cpu, b.memory, disk=settings.build_disk_limit),
              "volumeMounts": kaniko_mounts,
              "securityContext": {"runAsUser": 0, "runAsNonRoot": False,
                                  **hardening.container_security(hardening.BUILD_CAPABILITIES)}}
    push = {"name": "push", "image": b.push_image, "imagePullPolicy": "IfNotPresent",
            "args": ["push", IMAGE_TAR, destination], "env": [{"name": "DOCKER_CONFIG", "value": PUSH_AUTH}],
            "resources": manifests.resources("500m", "256Mi", disk=settings.build_disk_limit),
            "volumeMounts": push_mounts,
            "securityContext": {"runAsUser": PUSH_USER, "runAsGroup": PUSH_USER, "runAsNonRoot": True,
                                **hardening.container_security()}}
    spec: Obj = {
        "restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
        "hostNetwork": False, "hostPID": False, "hostIPC": False,
        "securityContext": hardening.build_pod_security(),
        "initContainers": [kaniko], "containers": [push], "volumes": volumes,
    }
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = list(settings.tolerations)
    lbls = manifests.labels(job, "build")
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{job.k8s_name}-build", "namespace": ns, "labels": lbls,
                         **({"ownerReferences": [owner]} if owner else {})},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": dict(lbls)}, "spec": spec}}}


def requirements(ctx: ClusterContext, job: Job) -> str:
    try:
        return (ctx.snapshot(job) / "package" / "requirements.txt").read_text()
    except FileNotFoundError:
        return ""


def runtime(ctx: ClusterContext, job: Job) -> tuple[str, bool]:
    """The job's image, and whether it has the requirements installed already (built here)."""
    base = manifests.image_for(job, ctx.settings)
    reqs = requirements(ctx, job)
    if ctx.settings.build.enabled and reqs.strip():
        return runtime_image_name(ctx.settings, ctx.job_namespace(job), base, reqs), True
    return base, False


def pod_options(ctx: ClusterContext, job: Job) -> PodOptions:
    """What the job's pods are made with: its image, and the Secrets to pull it with."""
    image, ready = runtime(ctx, job)
    return PodOptions(image, ready, pull_secret_names(ctx.settings, job, ready),
                      max(1, int(django_settings.KILL_GRACE_SECONDS)))


def _build_secrets(ctx: ClusterContext, job: Job, ns: str, owner: Obj) -> tuple[str | None, str | None]:
    """This build's own Secrets: pull (the base image, with the user's own registry) for kaniko,
    push for the push container."""
    api, st = ctx.api, ctx.settings
    pull: dict[str, Obj] = {}
    if (reg := job.registry) is not None:  # no query when the job names no registry
        pull[reg.server] = manifests.docker_auth(reg.username, reg.password)
    push = shared_auths(ctx, st.build.push_secret) if st.build.push_secret and st.secrets_namespace else {}
    names: list[str | None] = []
    for suffix, auths in zip(BUILD_SECRETS, (pull, push), strict=True):
        if not auths:
            names.append(None)
            continue
        name = f"{job.k8s_name}-{suffix}"
        body = manifests.dockerconfig_secret(name, ns, auths, manifests.labels(job, "build"), owner)
        if api.create(api.core.create_namespaced_secret, ns, body=body) is None:
            api.call(api.core.replace_namespaced_secret, name, ns, body=body)  # credentials may have changed
        names.append(name)
    return names[0], names[1]


def marker_name(image: str) -> str:
    return "paddlecloud-runtime-" + image.rsplit(":", 1)[1]


def build_name(job: Job) -> str:
    return f"{job.k8s_name}-build"


def ensure_runtime_image(ctx: ClusterContext, job: Job) -> bool:
    """True once the job's runtime image is built; else its build is started (once) and False:
    the launch ends there and the watcher follows the build (BuildFollower, build_status)."""
    api, st = ctx.api, ctx.settings
    image, _ = runtime(ctx, job)
    ns = ctx.job_namespace(job)
    if api.raw(api.core.read_namespaced_config_map, marker_name(image), ns) is not None:
        return True  # built before
    build = api.raw(api.batch.read_namespaced_job, build_name(job), ns)
    if build is not None:  # started by an earlier launch of this job: its Secrets exist already
        return _ended_unfollowed(ctx, job, ns, image, build)
    owner = manifests.owner_reference(root.ensure(ctx, job, ns))
    (ctx.snapshot(job) / "Dockerfile").write_text(build_dockerfile(manifests.image_for(job, st)))
    secrets = _build_secrets(ctx, job, ns, owner)
    try:
        api.create(api.batch.create_namespaced_job, ns, body=build_job(
            job, st, ns, owner, destination=image, pull_auth=secrets[0], push_auth=secrets[1]))
    except BaseException:
        _delete_secrets(ctx, job, ns)  # no build will use them
        raise
    return False


def _ended_unfollowed(ctx: ClusterContext, job: Job, ns: str, image: str, build: Obj) -> bool:
    """A build that ended while no watcher followed it (the job was suspended meanwhile, or the
    watcher failed to record the end): settled here as the watcher would have. False: under way."""
    pod = _build_pod(ctx.api, ns, build_name(job))
    ended = _ended(build, pod)
    if ended == READY:
        _built(ctx, job, ns, image)
    elif ended == FAILED:
        _delete_secrets(ctx, job, ns)
        raise LaunchError(*_failure(ctx.api, ns, image, pod))
    return ended == READY


def _built(ctx: ClusterContext, job: Job, ns: str, image: str) -> None:
    """Record the image as built (the next job of its user with these requirements skips the build)."""
    api = ctx.api
    marker = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": marker_name(image), "namespace": ns, "labels": dict(manifests.MANAGED_BY)},
              "data": {"image": image}}
    api.create(api.core.create_namespaced_config_map, ns, body=marker)
    _delete_secrets(ctx, job, ns)


def _delete_secrets(ctx: ClusterContext, job: Job, ns: str) -> None:
    """The push credentials live only as long as the build."""
    api = ctx.api
    for suffix in BUILD_SECRETS:
        api.delete(api.core.delete_namespaced_secret, f"{job.k8s_name}-{suffix}", ns)


def _ended(build: Obj, pod: Obj | None) -> str | None:
    """READY (the Job is Complete), FAILED (the Job, or its pod a moment before), or None."""
    conditions = {c.get("type"): c for c in (build.get("status") or {}).get("conditions") or []}
    if (conditions.get("Complete") or {}).get("status") == "True":
        return READY
    if (conditions.get("Failed") or {}).get("status") == "True" or _pod_failed(pod):
        return FAILED
    return None


def _pod_failed(pod: Obj | None) -> bool:
    return pod is not None and pod_status(pod, "build").state == ReplicaState.FAILED


def _failure(api: Api, ns: str, image: str, pod: Obj | None) -> tuple[str, str]:
    """The failed build's reason and message: the pod's reason and the end of the build log."""
    # The pod fails a moment before the Job controller marks the Job Failed: either way the user
    # gets the pod's reason and the end of the build log.
    container, why = _failed_step(pod) if pod is not None and _pod_failed(pod) else ("kaniko", "")
    return ("RuntimeImageBuildFailed", f"building the runtime image {image} from requirements.txt failed{why}. "
                                       f"Last log lines:\n{_tail(api, ns, pod, container)}")


def _watched_build(state: ClusterState, job: Job, ns: str) -> tuple[Obj | None, Obj | None]:
    """The job's build Job and its newest pod, as the watches saw them."""
    build = state.workload(JOB, ns, build_name(job))
    live, _ = state.pods_of(job.pk)
    pods = [p for p in live if (meta(p).get("labels") or {}).get(manifests.LABEL_ROLE) == "build"]
    return build, max(pods, key=lambda p: meta(p).get("creationTimestamp") or "") if pods else None


def build_status(ctx: ClusterContext, state: ClusterState, job: Job) -> Preparation | None:
    """The build of a Building job as the watches saw it, for the lifecycle (no API call but
    for the build log's end when it failed)."""
    ns = ctx.job_namespace(job)
    build, pod = _watched_build(state, job, ns)
    if build is None:
        return None
    ended = _ended(build, pod)
    if ended == READY:
        return Preparation(READY)
    if ended == FAILED:
        return Preparation(FAILED, *_failure(ctx.api, ns, runtime(ctx, job)[0], pod))
    status = pod_status(pod, "build") if pod is not None else None
    if status is not None and pod is not None and status.state == ReplicaState.PENDING:
        since = parse_time(meta(pod).get("creationTimestamp")) or parse_time(meta(build).get("creationTimestamp"))
        return Preparation(PENDING, status.reason, status.message, "the image build", since)
    return Preparation(PREPARING)


def unfinished_builds(state: ClusterState) -> set[int]:
    """The jobs whose build the watches see under way."""
    with state.lock:
        jobs = list(state.objects[JOB].values())
    return {i for o in jobs if (meta(o).get("labels") or {}).get(manifests.LABEL_ROLE) == "build"
            and not workload_finished(o) and (i := ClusterState.job_id(o)) is not None}


class BuildFollower:
    """The watcher's side of a datacenter's builds, on each of its passes over a Building job:
    kaniko's output copied into the job's build log, and once the build ended its push
    credentials deleted and, if it succeeded, the image recorded as built (then the lifecycle
    continues the launch, told by build_status)."""

    def __init__(self, ctx: ClusterContext):
        self.ctx = ctx
        self.copies: dict[int, BuildLogCopy] = {}

    def follow(self, job: Job, state: ClusterState) -> None:
        ns = self.ctx.job_namespace(job)
        build, pod = _watched_build(state, job, ns)
        if build is None:
            return
        if (copy := self.copies.get(job.pk)) is None:
            # What is in the build log is this build's (a job builds once): a watcher that
            # starts over goes on from there rather than copying it again.
            copy = self.copies[job.pk] = BuildLogCopy(job, logstore.size(logstore.build_log(job)))
        if copy.ended:
            return
        copy.update(self.ctx.api, ns, pod)
        ended = _ended(build, pod)
        if ended == READY:
            _built(self.ctx, job, ns, runtime(self.ctx, job)[0])
        elif ended == FAILED:
            _delete_secrets(self.ctx, job, ns)
        copy.ended = ended is not None

    def forget(self, job_id: int) -> None:
        self.copies.pop(job_id, None)


class BuildLogCopy:
    """Copies kaniko's output (pip's, in the image build) into the job's build log as the build
    runs, so it is followed live like a replica's log and kept after the build pod is gone. The
    whole container log is read on each poll (a build log is small) and what is past the bytes
    already copied is appended."""

    def __init__(self, job: Job, copied: int = 0):
        self.job, self.pod, self.copied, self.ended = job, "", copied, False

    def update(self, api: Api, ns: str, pod: Obj | None) -> None:
        if pod is None or not _kaniko_started(pod):
            return
        name = pod["metadata"]["name"]
        if name != self.pod:  # another build pod: its log starts over
            self.pod, self.copied = name, 0 if self.pod else self.copied
        try:
            data = api.call_raw(api.core.read_namespaced_pod_log, name, ns, container="kaniko").data
        except Exception:  # noqa: BLE001 - the next poll reads it again; a failure reports the tail
            return
        if len(data) > self.copied:
            logstore.append_build(self.job, data[self.copied:])
            self.copied = len(data)


def _kaniko_started(pod: Obj) -> bool:
    st = pod.get("status") or {}
    if st.get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    kaniko: Obj = next((c for c in st.get("initContainerStatuses") or [] if c.get("name") == "kaniko"), {})
    return bool({"running", "terminated"} & set(kaniko.get("state") or {}))


def _build_pod(api: Api, ns: str, job_name: str) -> Obj | None:
    resp = api.call_raw(api.core.list_namespaced_pod, ns, label_selector=f"job-name={job_name}")
    items = json.loads(resp.data).get("items") or []
    return max(items, key=lambda p: p["metadata"].get("creationTimestamp") or "") if items else None


def _failed_step(pod: Obj) -> tuple[str, str]:
    """Which container failed (the build or the push) and how, for the user's message."""
    st = pod.get("status") or {}
    if why := disk_eviction(st):
        return "kaniko", f" (evicted: it wrote more to its node's disk than build.disk_limit, else disk_limit: {why})"
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("exitCode"):
            step = "building" if cs.get("name") == "kaniko" else "pushing"
            return cs["name"], f" ({step}: {describe_exit(term)})"
    return "kaniko", f" ({st.get('reason') or 'Failed'}: {st.get('message') or 'the build pod failed'})"


def _tail(api: Api, ns: str, pod: Obj | None, container: str) -> str:
    if pod is None:
        return "(no build pod)"
    try:
        resp = api.call_raw(api.core.read_namespaced_pod_log, pod["metadata"]["name"], ns, container=container,
                            tail_lines=LOG_TAIL_LINES)  # raw bytes: a log need not be valid UTF-8
    except Exception as e:  # noqa: BLE001 - the failure is reported either way
        return f"(the build log is unavailable: {e})"
    return resp.data.decode("utf-8", "replace").rstrip()
