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
the base image (the user's own registry's and the datacenter's read-only pull_secret). Then a
second container, which runs no user code and shares only the tarball's emptyDir with it, pushes
the tarball to the one destination the server chose (crane). The push credentials are copied
for this build only into a Secret `<job>-push` mounted into that container alone, deleted as
soon as the build ends (and with the job's root if the job is killed). What is not protected
here: the push credentials are the datacenter's, so the registry must scope them (a robot
account that may push only to <registry>/paddlecloud-runtime); the remote layer cache is off
(it would need push credentials inside kaniko). The build runs while the job
is Building, awaited by the launch task (whose heartbeat keeps its lease); kaniko's output is
copied into the job's `build` log as it comes (BuildLogCopy); a failed build fails
the job with the build log's tail, a build stuck Pending fails it with the reason.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings
from django.utils import timezone

from ...live import logstore
from ...models import Job, JobState
from ..base import LaunchError
from . import hardening, manifests, root
from .client import Api
from .config import K8sSettings
from .context import ClusterContext
from .pull import pull_secret_names, shared_auths
from .status import describe_exit, parse_time, pod_status
from .workloads import PodOptions

POLL_SECONDS = 2.0
LOG_TAIL_LINES = 25
IMAGE_TAR = "/image/image.tar"
PUSH_AUTH = "/push-auth"
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
              "resources": manifests.resources(b.cpu, b.memory), "volumeMounts": kaniko_mounts,
              "securityContext": {"runAsUser": 0, "runAsNonRoot": False,
                                  **hardening.container_security(hardening.BUILD_CAPABILITIES)}}
    push = {"name": "push", "image": b.push_image, "imagePullPolicy": "IfNotPresent",
            "args": ["push", IMAGE_TAR, destination], "env": [{"name": "DOCKER_CONFIG", "value": PUSH_AUTH}],
            "resources": manifests.resources("500m", "256Mi"), "volumeMounts": push_mounts,
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
    """This build's own Secrets: pull (base image) for kaniko, push for the push container."""
    api, st = ctx.api, ctx.settings
    pull: dict[str, Obj] = {}
    if st.build.pull_secret and st.secrets_namespace:
        pull.update(shared_auths(ctx, st.build.pull_secret))
    if (reg := job.registry) is not None:  # no query when the job names no registry
        pull[reg.server] = manifests.docker_auth(reg.username, reg.password)
    push = shared_auths(ctx, st.build.push_secret) if st.build.push_secret and st.secrets_namespace else {}
    names: list[str | None] = []
    for suffix, auths in (("build-pull", pull), ("push", push)):
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


def ensure_runtime_image(ctx: ClusterContext, job: Job, heartbeat: Callable[[], None]) -> None:
    api, st = ctx.api, ctx.settings
    image, _ = runtime(ctx, job)
    ns = ctx.job_namespace(job)
    if api.raw(api.core.read_namespaced_config_map, marker_name(image), ns) is not None:
        return  # built before
    owner = manifests.owner_reference(root.ensure(ctx, job, ns))
    (ctx.snapshot(job) / "Dockerfile").write_text(build_dockerfile(manifests.image_for(job, st)))
    secrets = _build_secrets(ctx, job, ns, owner)
    try:
        api.create(api.batch.create_namespaced_job, ns, body=build_job(
            job, st, ns, owner, destination=image, pull_auth=secrets[0], push_auth=secrets[1]))
        _await_build(ctx, job, image, ns, heartbeat)
    finally:
        # The push credentials live only as long as the build.
        for name in filter(None, secrets):
            api.delete(api.core.delete_namespaced_secret, name, ns)


def _await_build(ctx: ClusterContext, job: Job, image: str, ns: str, heartbeat: Callable[[], None]) -> None:
    api, st = ctx.api, ctx.settings
    name = f"{job.k8s_name}-build"
    started = timezone.now()
    copied = BuildLogCopy(job)
    while True:
        heartbeat()
        if not Job.objects.filter(pk=job.pk, state=JobState.BUILDING).exists():
            return  # killed: stop() removes the build with everything else
        build = api.raw(api.batch.read_namespaced_job, name, ns) or {}
        conditions = {c.get("type"): c for c in (build.get("status") or {}).get("conditions") or []}
        pod = _build_pod(api, ns, name)
        copied.update(api, ns, pod)
        if (conditions.get("Complete") or {}).get("status") == "True":
            marker = {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": marker_name(image), "namespace": ns, "labels": dict(manifests.MANAGED_BY)},
                      "data": {"image": image}}
            api.create(api.core.create_namespaced_config_map, ns, body=marker)
            return
        status = pod_status(pod, "build") if pod is not None else None
        pod_failed = status is not None and status.state == "Failed"
        # The pod fails a moment before the Job controller marks the Job Failed: either way the
        # user gets the pod's reason and the end of the build log.
        if pod_failed or (conditions.get("Failed") or {}).get("status") == "True":
            container, why = _failed_step(pod) if pod is not None and pod_failed else ("kaniko", "")
            raise LaunchError("RuntimeImageBuildFailed",
                              f"building the runtime image {image} from requirements.txt failed{why}. "
                              f"Last log lines:\n{_tail(api, ns, pod, container)}")
        if status is not None and pod is not None:
            since = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or started
            if status.state == "Pending" and (timezone.now() - since).total_seconds() > st.pending_timeout:
                raise LaunchError(status.reason or "PendingTimeout",
                                  f"the image build did not start within {st.pending_timeout} s: {status.message}")
        time.sleep(POLL_SECONDS)


class BuildLogCopy:
    """Copies kaniko's output (pip's, in the image build) into the job's build log as the build
    runs, so it is followed live like a replica's log and kept after the build pod is gone. The
    whole container log is read on each poll (a build log is small) and what is past the bytes
    already copied is appended."""

    def __init__(self, job: Job):
        self.job, self.pod, self.copied = job, "", 0

    def update(self, api: Api, ns: str, pod: Obj | None) -> None:
        if pod is None or not _kaniko_started(pod):
            return
        name = pod["metadata"]["name"]
        if name != self.pod:  # a new build pod (the launch was taken over): its log starts over
            self.pod, self.copied = name, 0
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
