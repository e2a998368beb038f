"""Kubernetes backend: a job's replicas as objects in its user's namespace (manifests.py).

prepare: the package is snapshotted in PFS (as the local backend copies it), the user's
  namespace, ResourceQuota, NetworkPolicies (hardening.py) and copied Secrets are ensured,
  and the runtime image is built if the datacenter builds them (runtime.py).
launch: root ConfigMap, pull Secret, the job's NetworkPolicy, then the current attempt's
  objects: (gang scheduling: its PodGroup,) headless Services, pserver StatefulSet; the trainer
  Job only once every pserver is ready (seed 001's order): the watcher calls `advance()` when
  the StatefulSet reports them ready. Collective jobs, and every job under a gang scheduler
  (which binds all pods or none), start their trainers at once. Under Kueue a pserver job is one
  suspended JobSet instead (workloads.jobset), which Kueue admits whole.
restart: a gang restart (the lifecycle's; a failed trainer alone is retried by its Job, see
  workloads.trainer_failure_policy): the previous attempt's objects are deleted and the new
  attempt's created under new names (manifests.attempt_suffix).
suspend: `spec.suspend` on the trainer Job (its controller deletes the pods, gracefully) and the
  pserver StatefulSet scaled to 0; under Kueue, which owns `suspend`, they (or the JobSet) are
  deleted. Resume is launch(): a new attempt's objects, or the suspended ones resumed.
stop: deleting the root cascades to everything (kill leaves nothing behind); stopping only the
  pservers (all trainers done) deletes their StatefulSet (a JobSet: the whole JobSet).
delete: a foreground delete of the root, waited for, so the name is free when the job row goes.
observe: from the watcher's in-memory state (observe.py); no API call per job.

Every step is idempotent: creates that meet 409 and deletes that meet 404 count as done.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings as django_settings

from quotas.services import effective_quota

from ...live.usage import Usage
from ...models import TERMINAL_STATES, Job, JobState, Replica
from ..base import Backend, LaunchError, ReplicaStatus, ensure_checkpoint_dir, snapshot_package
from . import gang, hardening, informer, manifests, pull, workloads
from . import usage as pod_usage
from .client import MERGE_PATCH, Api, api_for
from .config import K8sSettings, SettingsError, for_datacenter, parse
from .observe import current_attempt, observe_job
from .watcher import KubernetesWatcher

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from accounts.models import Datacenter

log = logging.getLogger(__name__)
ROOT_WAIT_SECONDS = 30
DELETE_WAIT_SECONDS = 60


class _PodOptions(TypedDict):
    """What every workload of a job is made with, besides the job and the settings."""

    image: str
    runtime_ready: bool
    pull_secrets: list[str]
    grace_seconds: int


class KubernetesBackend(Backend):
    restarts_replicas = True  # a trainer Job retries a failed index itself (backoffLimitPerIndex)

    def __init__(self, datacenter: Datacenter):
        super().__init__(datacenter)
        self._api: Api | None = None

    @classmethod
    def watcher(cls, backend: str) -> KubernetesWatcher:
        return KubernetesWatcher(backend, cls)

    @classmethod
    def check_config(cls, name: str, config: dict[str, Any]) -> None:
        parse(name, config)

    @property
    def settings(self) -> K8sSettings:
        try:
            return for_datacenter(self.datacenter)
        except SettingsError as e:
            raise LaunchError("DatacenterMisconfigured", f"datacenter {self.datacenter.name}: {e}") from e

    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = api_for(self.datacenter)
        return self._api

    def namespace(self, job: Job) -> str:
        return self.settings.namespace(job.user.get_username())

    def snapshot(self, job: Job) -> Path:
        """The job's package copy on the server's view of the shared PFS volume."""
        return django_settings.PFS_ROOT / self.datacenter.name / manifests.snapshot_dir(job)

    def requirements(self, job: Job) -> str:
        try:
            return (self.snapshot(job) / "package" / "requirements.txt").read_text()
        except FileNotFoundError:
            return ""

    def runtime(self, job: Job) -> tuple[str, bool]:
        """(image, whether it already has the requirements installed)."""
        from .runtime import runtime_image_name

        base = manifests.image_for(job, self.settings)
        requirements = self.requirements(job)
        if self.settings.build.enabled and requirements.strip():
            return runtime_image_name(self.settings, self.namespace(job), base, requirements), True
        return base, False

    # --- prepare ---------------------------------------------------------------------------
    def prepare(self, job: Job, heartbeat: Callable[[], None]) -> None:
        self._snapshot(job)
        self.ensure_namespace(job.user)
        if self.runtime(job)[1]:
            from .runtime import ensure_runtime_image

            ensure_runtime_image(self, job, heartbeat)

    def _snapshot(self, job: Job) -> None:
        snapshot_package(job, self.snapshot(job) / "package")
        # subPath mounts of missing directories would be created by the kubelet as root.
        base = django_settings.PFS_ROOT / self.datacenter.name
        (base / "home" / job.user.get_username()).mkdir(parents=True, exist_ok=True)
        (base / "public").mkdir(parents=True, exist_ok=True)
        ensure_checkpoint_dir(job)

    def ensure_namespace(self, user: User) -> str:
        """The user's namespace with its ResourceQuota, NetworkPolicies and copied Secrets; safe to
        repeat, and a repeat brings them up to date with the quota and the settings."""
        st, api = self.settings, self.api
        ns = st.namespace(user.get_username())
        api.create(api.core.create_namespace, body=manifests.namespace(st, user.get_username()))
        quota = effective_quota(user, self.datacenter)
        body = manifests.resource_quota(ns, cpu_millicores=quota.cpu_millicores, memory_bytes=quota.memory_bytes,
                                        gpus=quota.gpus)
        if api.create(api.core.create_namespaced_resource_quota, ns, body=body) is None:
            api.call(api.core.replace_namespaced_resource_quota, body["metadata"]["name"], ns, body=body)
        for policy in hardening.namespace_policies(st, ns):
            if api.create(api.networking.create_namespaced_network_policy, ns, body=policy) is None:
                api.call(api.networking.replace_namespaced_network_policy, policy["metadata"]["name"], ns, body=policy)
        for name in self._shared_secrets():
            source = api.raw(api.core.read_namespaced_secret, name, st.secrets_namespace)
            if source is None:
                raise LaunchError("SecretMissing", f"datacenter {self.datacenter.name}: Secret {name} not found in "
                                                   f"namespace {st.secrets_namespace}")
            copy = manifests.copied_secret(source, ns)
            if api.create(api.core.create_namespaced_secret, ns, body=copy) is None:
                api.call(api.core.replace_namespaced_secret, name, ns, body=copy)
        return ns

    def _shared_secrets(self) -> list[str]:
        st = self.settings
        if not st.secrets_namespace:
            return []
        # Registry credentials are never copied whole: see runtime.py and pull.py.
        return [st.storage.secret_name] if st.storage.kind == "cephfs" else []

    # --- launch ----------------------------------------------------------------------------
    def _still(self, job: Job) -> bool:
        return Job.objects.filter(pk=job.pk, state__in=[JobState.BUILDING, JobState.STARTING]).exists()

    def launch(self, job: Job) -> None:
        ns = self.ensure_namespace(job.user)
        if not self._still(job):
            return  # killed meanwhile: create nothing
        self._start(job, ns, current_attempt(job))

    def _start(self, job: Job, ns: str, attempt: int) -> None:
        """Create the attempt's objects (those of the attempt before it are deleted first)."""
        api, st = self.api, self.settings
        owner = manifests.owner_reference(self.ensure_root(job, ns))
        if attempt:
            self._delete_attempt(job, ns, attempt - 1)
        image, ready = self.runtime(job)
        pulls = pull.ensure_pull_secret(api, st, job, ns, owner, ready)
        self._assign_endpoints(job, ns, attempt)
        api.create(api.networking.create_namespaced_network_policy, ns, body=manifests.network_policy(job, ns, owner))
        opts: _PodOptions = {"image": image, "runtime_ready": ready, "pull_secrets": pulls,
                             "grace_seconds": self._grace()}
        if st.kubeflow:
            api.create(api.custom.create_namespaced_custom_object, "kubeflow.org", "v1", ns, "paddlejobs",
                       body=workloads.paddle_job(job, st, ns, owner, attempt=attempt, **opts))
            return
        if st.gang_scheduler == gang.VOLCANO:
            api.create(api.custom.create_namespaced_custom_object, *gang.PODGROUP_API[:2], ns, gang.PODGROUP_API[2],
                       body=workloads.podgroup(job, st, ns, owner, attempt))
        if gang.uses_jobset(st, job.pservers):
            # One object for Kueue to admit whole; its controller makes the Jobs and the Service.
            api.create(api.custom.create_namespaced_custom_object, *gang.JOBSET_API[:2], ns, gang.JOBSET_API[2],
                       body=workloads.jobset(job, st, ns, owner, attempt=attempt, **opts))
            return
        if job.pservers:
            api.create(api.core.create_namespaced_service, ns,
                       body=manifests.headless_service(job, ns, "pserver", st.pserver_port, owner, attempt))
            body = workloads.pserver_statefulset(job, st, ns, owner, attempt=attempt, **opts)
            if api.create(api.apps.create_namespaced_stateful_set, ns, body=body) is None:
                # Suspended (scaled to 0) earlier in this attempt: resume.
                api.call(api.apps.patch_namespaced_stateful_set, body["metadata"]["name"], ns,
                         body={"spec": {"replicas": job.pservers}}, _content_type=MERGE_PATCH)
        api.create(api.core.create_namespaced_service, ns,
                   body=manifests.headless_service(job, ns, "trainer", st.trainer_port, owner, attempt))
        if not job.pservers or gang.enabled(st):
            self._create_trainers(job, ns, attempt, workloads.trainer_job(job, st, ns, owner, attempt=attempt, **opts))
        else:
            self.advance(job)  # a relaunch may find the pservers ready already

    def _create_trainers(self, job: Job, ns: str, attempt: int, body: dict[str, Any]) -> None:
        api = self.api
        if api.create(api.batch.create_namespaced_job, ns, body=body) is None and \
                self.settings.gang_scheduler != gang.KUEUE:
            # Suspended earlier in this attempt: resume (under Kueue, Kueue unsuspends it).
            api.call(api.batch.patch_namespaced_job, body["metadata"]["name"], ns, body={"spec": {"suspend": False}},
                     _content_type=MERGE_PATCH)

    def advance(self, job: Job, ready: int | None = None) -> bool:
        """Create the trainers once every pserver is ready; True when they exist (or were made)."""
        st, api = self.settings, self.api
        if st.kubeflow or not job.pservers or gang.enabled(st):
            return False
        ns, attempt = self.namespace(job), current_attempt(job)
        if ready is None:
            sset = api.raw(api.apps.read_namespaced_stateful_set, manifests.pserver_name(job, attempt), ns)
            ready = int(((sset or {}).get("status") or {}).get("readyReplicas") or 0)
        if ready < job.pservers:
            return False
        root = api.raw(api.core.read_namespaced_config_map, manifests.root_name(job), ns)
        if not root or (root["metadata"].get("labels") or {}).get(manifests.LABEL_JOB_ID) != str(job.pk) \
                or root["metadata"].get("deletionTimestamp"):
            return False  # stopped meanwhile
        image, runtime_ready = self.runtime(job)
        pulls = pull.pull_secret_names(st, job, runtime_ready)
        body = workloads.trainer_job(job, st, ns, manifests.owner_reference(root), image=image, attempt=attempt,
                                     runtime_ready=runtime_ready, pull_secrets=pulls, grace_seconds=self._grace())
        self._create_trainers(job, ns, attempt, body)
        return True

    def _grace(self) -> int:
        return max(1, int(django_settings.KILL_GRACE_SECONDS))

    def ensure_root(self, job: Job, ns: str) -> dict[str, Any]:
        """The job's root object (owner of all others). A root left by an earlier job of the same
        name is waited out while the cluster deletes it, then the answer is a clear error."""
        api = self.api
        body = manifests.root(job, ns)
        name = body["metadata"]["name"]
        deadline = time.monotonic() + ROOT_WAIT_SECONDS
        while True:
            created = api.create(api.core.create_namespaced_config_map, ns, body=body)
            if created is not None:
                assert created.metadata is not None  # the API server sets it on every object
                return {"metadata": {"name": created.metadata.name, "uid": created.metadata.uid}}
            existing = api.raw(api.core.read_namespaced_config_map, name, ns)
            if existing is None:
                continue  # deleted between the two calls
            md = existing["metadata"]
            if (md.get("labels") or {}).get(manifests.LABEL_JOB_ID) == str(job.pk):
                return existing  # ours, from an earlier attempt
            if not md.get("deletionTimestamp"):
                # Left by a job whose row is gone (deleted while the cluster was unreachable).
                api.delete(api.core.delete_namespaced_config_map, name, ns, propagation="Foreground")
            if time.monotonic() > deadline:
                raise LaunchError("NameInUse", f"the cluster is still deleting the objects of an earlier job named "
                                               f"'{job.name}'; submit again in a minute, or use another name")
            time.sleep(1)

    def _assign_endpoints(self, job: Job, ns: str, attempt: int) -> None:
        topo = manifests.topology(job, self.settings, ns, attempt)
        for replica in job.replicas.all():
            endpoint = (topo.pservers if replica.role == Replica.Role.PSERVER else topo.trainers)[replica.index]
            host, port = endpoint.rsplit(":", 1)
            if replica.host != host or replica.port != int(port):
                Replica.objects.filter(pk=replica.pk).update(host=host, port=int(port))

    # --- stop, delete ----------------------------------------------------------------------
    def stop(self, job: Job, replicas: Iterable[Replica] | None = None) -> None:
        try:
            api, ns = self.api, self.namespace(job)
        except LaunchError as e:
            log.warning("job %s: cannot stop: %s", job.pk, e.message)
            return
        roles = None if replicas is None else {r.role for r in replicas}
        if roles is None or job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED):
            # Everything hangs off the root: one delete, the garbage collector does the rest.
            root = api.raw(api.core.read_namespaced_config_map, manifests.root_name(job), ns)
            if root and (root["metadata"].get("labels") or {}).get(manifests.LABEL_JOB_ID) == str(job.pk):
                api.delete(api.core.delete_namespaced_config_map, manifests.root_name(job), ns)
            return
        attempt = current_attempt(job)
        if gang.uses_jobset(self.settings, job.pservers):
            # One JobSet holds both roles: stopping either (a gang restart stops both; the
            # pservers alone once the trainers are done) deletes it, its Jobs and pods.
            self._delete_jobset(job, ns, attempt)
            return
        if "pserver" in roles:
            api.delete(api.apps.delete_namespaced_stateful_set, manifests.pserver_name(job, attempt), ns)
        if "trainer" in roles:
            api.delete(api.batch.delete_namespaced_job, manifests.trainer_name(job, attempt), ns)

    def _delete_attempt(self, job: Job, ns: str, attempt: int) -> None:
        """Every object of one attempt (the root and what all attempts share stay). A deleted
        Service is answered with the Service or a Status, by server version: not decoded."""
        api, st = self.api, self.settings
        if st.kubeflow:
            api.delete(api.custom.delete_namespaced_custom_object, "kubeflow.org", "v1", ns, "paddlejobs",
                       manifests.paddle_job_name(job, attempt))
            return
        if gang.uses_jobset(st, job.pservers):
            self._delete_jobset(job, ns, attempt)
            return
        ps, tr = manifests.pserver_name(job, attempt), manifests.trainer_name(job, attempt)
        if job.pservers:
            api.delete(api.apps.delete_namespaced_stateful_set, ps, ns)
            api.delete(api.core.delete_namespaced_service, ps, ns, _preload_content=False)
        api.delete(api.batch.delete_namespaced_job, tr, ns)
        api.delete(api.core.delete_namespaced_service, tr, ns, _preload_content=False)
        if st.gang_scheduler == gang.VOLCANO:
            api.delete(api.custom.delete_namespaced_custom_object, *gang.PODGROUP_API[:2], ns, gang.PODGROUP_API[2],
                       manifests.podgroup_name(job, attempt))

    def _delete_jobset(self, job: Job, ns: str, attempt: int) -> None:
        self.api.delete(self.api.custom.delete_namespaced_custom_object, *gang.JOBSET_API[:2], ns,
                        gang.JOBSET_API[2], manifests.jobset_name(job, attempt))

    def restart(self, job: Job, replicas: Iterable[Replica]) -> None:
        """A gang restart: the replicas' new attempt gets fresh objects (the Job restarts a
        single trainer itself, so the lifecycle only restarts every replica at once here)."""
        if not Job.objects.filter(pk=job.pk).exclude(state__in=[*TERMINAL_STATES, JobState.SUSPENDED]).exists():
            return
        self._start(job, self.ensure_namespace(job.user), current_attempt(job))

    def suspend(self, job: Job) -> None:
        api, st, ns = self.api, self.settings, self.namespace(job)
        attempt = current_attempt(job)
        if st.kubeflow or st.gang_scheduler == gang.KUEUE:
            # Kueue owns a managed Job's `suspend`; the training operator has no such field.
            self._delete_attempt(job, ns, attempt)
            return
        if job.pservers:
            self._patch(api.apps.patch_namespaced_stateful_set, manifests.pserver_name(job, attempt), ns,
                        {"spec": {"replicas": 0}})
        self._patch(api.batch.patch_namespaced_job, manifests.trainer_name(job, attempt), ns,
                    {"spec": {"suspend": True}})
        if st.gang_scheduler == gang.VOLCANO:
            # A waiting PodGroup holds a place in Volcano's queue: a suspended job gives it up.
            api.delete(api.custom.delete_namespaced_custom_object, *gang.PODGROUP_API[:2], ns, gang.PODGROUP_API[2],
                       manifests.podgroup_name(job, attempt))

    def _patch(self, fn: Callable[..., Any], name: str, ns: str, body: dict[str, Any]) -> None:
        """A merge patch of an object that may not exist (never made, or already gone)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.call(fn, name, ns, body=body, _content_type=MERGE_PATCH)
        except ApiException as e:
            if e.status != 404:
                raise

    def delete(self, job: Job) -> None:
        api, ns, name = self.api, self.namespace(job), manifests.root_name(job)
        deadline = time.monotonic() + DELETE_WAIT_SECONDS
        while True:
            root = api.raw(api.core.read_namespaced_config_map, name, ns)
            if root is None or (root["metadata"].get("labels") or {}).get(manifests.LABEL_JOB_ID) != str(job.pk):
                break
            if not root["metadata"].get("deletionTimestamp"):
                api.delete(api.core.delete_namespaced_config_map, name, ns, propagation="Foreground")
            if time.monotonic() > deadline:
                # The task fails and the periodic reconcile tries again; the name stays taken.
                raise LaunchError("DeleteTimeout", f"the cluster has not finished deleting job {job.name}")
            time.sleep(0.5)
        shutil.rmtree(self.snapshot(job), ignore_errors=True)

    # --- observe ---------------------------------------------------------------------------
    def usage(self, job: Job) -> dict[tuple[str, int], Usage]:
        """From the metrics API, for the pods the watcher process sees (elsewhere: none)."""
        watcher = informer.running(self.datacenter.pk)
        if watcher is None or not watcher.state.ready():
            return {}
        live, _ = watcher.state.pods_of(job.pk)
        ns = self.namespace(job)
        return pod_usage.parse(pod_usage.pod_metrics(self.api, ns, job.pk), live)

    def observe(self, job: Job) -> dict[tuple[str, int], ReplicaStatus]:
        """What the watcher process has seen. Elsewhere (worker, web) nothing is reported and
        the job keeps its recorded replica states: status is the watcher's, not a poll's."""
        watcher = informer.running(self.datacenter.pk)
        if watcher is None or not watcher.state.ready():
            return {}
        st = self.settings
        return observe_job(watcher.state, job, self.namespace(job), gang_on=gang.enabled(st),
                           jobset=gang.uses_jobset(st, job.pservers), kubeflow=st.kubeflow)
