"""Runtime images built in the cluster (seed 001): the base image plus the package's
requirements.txt, built by a kaniko Job and pushed to the datacenter's registry, so users never
need Docker. Optional per datacenter (`build.enabled`).

The image is named by a hash of the base image and the requirements, like the local backend's
cached virtualenvs: jobs with the same requirements share it. A ConfigMap in the user's
namespace records a successful build, so the next job skips it. The build runs while the job
is Building, awaited by the launch task (whose heartbeat keeps its lease); a failed build fails
the job with the build log's tail, a build stuck Pending fails it with the reason.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from django.utils import timezone

from .. import manifests
from ..models import Job, JobState
from .base import LaunchError
from .k8s_settings import K8sSettings
from .k8s_status import parse_time, pod_status

POLL_SECONDS = 2.0
LOG_TAIL_LINES = 25


def requirements_key(base_image: str, requirements: str) -> str:
    lines = sorted(line.strip() for line in requirements.splitlines() if line.strip() and not line.startswith("#"))
    return hashlib.sha256((base_image + "\n" + "\n".join(lines)).encode()).hexdigest()[:16]


def runtime_image_name(settings: K8sSettings, base_image: str, requirements: str) -> str:
    return f"{settings.build.registry.rstrip('/')}/paddlecloud-runtime:{requirements_key(base_image, requirements)}"


def marker_name(image: str) -> str:
    return "paddlecloud-runtime-" + image.rsplit(":", 1)[1]


def ensure_runtime_image(backend, job, heartbeat: Callable[[], None]) -> None:
    api, st = backend.api, backend.settings
    image, _ = backend.runtime(job)
    ns = backend.namespace(job)
    if api.raw(api.core.read_namespaced_config_map, marker_name(image), ns) is not None:
        return  # built before
    owner = manifests.owner_reference(backend.ensure_root(job, ns))
    auth = backend.ensure_pull_secret(job, ns, owner, True)
    (backend.snapshot(job) / "Dockerfile").write_text(manifests.build_dockerfile(manifests.image_for(job, st)))
    name = f"{job.name}-build"
    api.create(api.batch.create_namespaced_job, ns, body=manifests.build_job(
        job, st, ns, owner, destination=image, auth_secret=auth[0] if auth else None))
    started = timezone.now()
    while True:
        heartbeat()
        if not Job.objects.filter(pk=job.pk, state=JobState.BUILDING).exists():
            return  # killed: stop() removes the build with everything else
        build = api.raw(api.batch.read_namespaced_job, name, ns) or {}
        conditions = {c.get("type"): c for c in (build.get("status") or {}).get("conditions") or []}
        if (conditions.get("Complete") or {}).get("status") == "True":
            marker = {"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": marker_name(image), "namespace": ns, "labels": dict(manifests.MANAGED_BY)},
                      "data": {"image": image}}
            api.create(api.core.create_namespaced_config_map, ns, body=marker)
            return
        pod = _build_pod(api, ns, name)
        status = pod_status(pod, "build") if pod is not None else None
        pod_failed = status is not None and status.state == "Failed"
        # The pod fails a moment before the Job controller marks the Job Failed: either way the
        # user gets the pod's reason and the end of the build log.
        if pod_failed or (conditions.get("Failed") or {}).get("status") == "True":
            why = f" ({status.reason}: {status.message})" if pod_failed else ""
            raise LaunchError("RuntimeImageBuildFailed",
                              f"building the runtime image {image} from requirements.txt failed{why}. "
                              f"Last log lines:\n{_tail(api, ns, pod)}")
        if status is not None:
            since = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or started
            if status.state == "Pending" and (timezone.now() - since).total_seconds() > st.pending_timeout:
                raise LaunchError(status.reason or "PendingTimeout",
                                  f"the image build did not start within {st.pending_timeout} s: {status.message}")
        time.sleep(POLL_SECONDS)


def _build_pod(api, ns: str, job_name: str) -> dict | None:
    resp = api.call(api.core.list_namespaced_pod, ns, label_selector=f"job-name={job_name}", _preload_content=False)
    import json

    items = json.loads(resp.data).get("items") or []
    return max(items, key=lambda p: p["metadata"].get("creationTimestamp") or "") if items else None


def _tail(api, ns: str, pod: dict | None) -> str:
    if pod is None:
        return "(no build pod)"
    try:
        resp = api.call(api.core.read_namespaced_pod_log, pod["metadata"]["name"], ns, tail_lines=LOG_TAIL_LINES,
                        _preload_content=False)  # raw bytes: a log need not be valid UTF-8
    except Exception as e:  # noqa: BLE001 - the failure is reported either way
        return f"(the build log is unavailable: {e})"
    return resp.data.decode("utf-8", "replace").rstrip()
