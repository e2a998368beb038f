"""Kubernetes backend: a job's replicas as objects in its user's namespace, in the shape of the
datacenter's layout (layouts/: plain StatefulSet + Indexed Job, or one JobSet) with its gang
scheduler's add-on (gang.py).

prepare: the package is snapshotted in PFS (as the local backend copies it), the user's
  namespace is set up (setup.py: once, and again when it changes), and the runtime image's build
  is started if the datacenter builds them (runtime.py): the launch task returns without
  waiting for it, the watcher follows it, and preparation() reports it to the lifecycle, which
  continues the launch once it is built.
launch: the root ConfigMap (root.py: it owns everything else), the pull Secret, the job's
  NetworkPolicy, then the current attempt's objects as its layout makes them; what waits for
  the job's progress (the plain layout's trainers: for the pservers) is made by the watcher.
restart: a gang restart (the lifecycle's; a failed trainer alone is retried by its Job, see
  workloads.trainer_failure_policy): the previous attempt's objects are deleted and the new
  attempt's created under new names (manifests.attempt_suffix).
suspend, stop: the layout's; stopping everything deletes the root, and its cascade the rest.
delete: a foreground delete of the root, waited for, so the name is free when the job row goes.
observe, preparation: from the watcher's in-memory state (observe.py, runtime.py); no API call
  per job.

Every step is idempotent: creates that meet 409 and deletes that meet 404 count as done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

from kubernetes.client.exceptions import ApiException

from launcher import fdtree

from ...live.usage import Usage
from ...models import TERMINAL_STATES, Job, JobState, Replica
from ..base import Backend, LaunchError, Preparation, ReplicaStatus, ensure_checkpoint_dir, snapshot_package
from . import discovery, manifests, pull, root, runtime, setup
from .config import K8sSettings, parse
from .context import ClusterContext, context_for
from .informer import running
from .layouts import Layout, layout_for
from .observe import current_attempt, gather, observe_job
from .usage import pod_usage
from .watcher import KubernetesWatcher

log = logging.getLogger(__name__)


class KubernetesBackend(Backend):
    restarts_replicas = True  # a trainer Job retries a failed index itself (backoffLimitPerIndex)

    @classmethod
    def watcher(cls, backend: str) -> KubernetesWatcher:
        return KubernetesWatcher(backend)

    @classmethod
    def check_config(cls, name: str, config: dict[str, Any]) -> None:
        parse(name, config)

    @classmethod
    def check_cluster(cls, name: str, config: dict[str, Any], kubeconfig: str) -> None:
        discovery.check_installed(parse(name, config), kubeconfig)

    @cached_property
    def ctx(self) -> ClusterContext:
        return context_for(self.datacenter)

    @property
    def settings(self) -> K8sSettings:
        return self.ctx.settings

    @cached_property
    def layout(self) -> Layout:
        return layout_for(self.settings)

    def pending_timeout(self) -> int | None:
        return self.settings.pending_timeout

    def namespace(self, job: Job) -> str:
        return self.ctx.job_namespace(job)

    # --- prepare ---------------------------------------------------------------------------
    def prepare(self, job: Job, heartbeat: Callable[[], None]) -> bool:
        snapshot_package(job, self.ctx.snapshot(job) / "package")
        # subPath mounts of missing directories would be created by the kubelet as root.
        (self.ctx.pfs_root / "home" / job.user.get_username()).mkdir(parents=True, exist_ok=True)
        (self.ctx.pfs_root / "public").mkdir(parents=True, exist_ok=True)
        ensure_checkpoint_dir(job)
        setup.ensure_namespace(self.ctx, job.user, self.datacenter)
        return not runtime.runtime(self.ctx, job)[1] or runtime.ensure_runtime_image(self.ctx, job)

    # --- launch ----------------------------------------------------------------------------
    def launch(self, job: Job) -> None:
        ns = setup.ensure_namespace(self.ctx, job.user, self.datacenter)
        if not Job.objects.filter(pk=job.pk, state__in=[JobState.BUILDING, JobState.STARTING]).exists():
            return  # killed meanwhile: create nothing
        self._start(job, ns, current_attempt(job))

    def _start(self, job: Job, ns: str, attempt: int) -> None:
        """Create the attempt's objects (those of the attempt before it are deleted first)."""
        try:
            owner = manifests.owner_reference(root.ensure(self.ctx, job, ns))
        except ApiException as e:
            if e.status != 404:
                raise
            setup.forget(self.ctx, ns)  # the namespace went away since it was set up: again
            ns = setup.ensure_namespace(self.ctx, job.user, self.datacenter)
            owner = manifests.owner_reference(root.ensure(self.ctx, job, ns))
        if attempt:
            self.layout.delete(self.ctx, job, ns, attempt - 1)
        opts = runtime.pod_options(self.ctx, job)
        pull.ensure_pull_secret(self.ctx, job, ns, owner, opts.runtime_ready)
        self._assign_endpoints(job, ns, attempt)
        self.ctx.api.create_object(manifests.network_policy(job, ns, owner))
        self.layout.create(self.ctx, job, ns, owner, attempt, opts)

    def _assign_endpoints(self, job: Job, ns: str, attempt: int) -> None:
        topo = self.layout.topology(job, ns, attempt)
        for replica in job.replicas.all():
            endpoint = (topo.pservers if replica.role == Replica.Role.PSERVER else topo.trainers)[replica.index]
            host, port = endpoint.rsplit(":", 1)
            if replica.host != host or replica.port != int(port):
                Replica.objects.filter(pk=replica.pk).update(host=host, port=int(port))

    # --- stop, delete ----------------------------------------------------------------------
    def stop(self, job: Job, replicas: Iterable[Replica] | None = None) -> None:
        try:
            ns = self.namespace(job)
        except LaunchError as e:
            log.warning("job %s: cannot stop: %s", job.pk, e.message)
            return
        if replicas is None or job.state in TERMINAL_STATES:
            root.stop(self.ctx, job, ns)
        else:
            self.layout.stop_roles(self.ctx, job, ns, current_attempt(job), {r.role for r in replicas})

    def restart(self, job: Job, replicas: Iterable[Replica]) -> None:
        """A gang restart: the replicas' new attempt gets fresh objects (the Job restarts a
        single trainer itself, so the lifecycle only restarts every replica at once here)."""
        if not Job.objects.filter(pk=job.pk).exclude(state__in=[*TERMINAL_STATES, JobState.SUSPENDED]).exists():
            return
        self._start(job, setup.ensure_namespace(self.ctx, job.user, self.datacenter), current_attempt(job))

    def suspend(self, job: Job) -> None:
        self.layout.suspend(self.ctx, job, self.namespace(job), current_attempt(job))

    def delete(self, job: Job) -> None:
        root.delete(self.ctx, job, self.namespace(job))
        fdtree.rmtree(self.ctx.snapshot(job))

    # --- observe ---------------------------------------------------------------------------
    def usage(self, job: Job) -> dict[tuple[str, int], Usage]:
        """The latest PodMetrics the watcher process sampled, never waited for (elsewhere: none)."""
        watcher = running(self.datacenter.pk)
        if watcher is None or watcher.usage is None or not watcher.state.ready():
            return {}
        return pod_usage(watcher.usage, watcher.state.pods_of(job.pk)[0])

    def preparation(self, job: Job) -> Preparation | None:
        """The runtime image's build as the watcher process has seen it (elsewhere: nothing)."""
        watcher = running(self.datacenter.pk)
        if watcher is None or not watcher.state.ready():
            return None
        return runtime.build_status(self.ctx, watcher.state, job)

    def observe(self, job: Job) -> dict[tuple[str, int], ReplicaStatus]:
        """What the watcher process has seen. Elsewhere (worker, web) nothing is reported and
        the job keeps its recorded replica states: status is the watcher's, not a poll's."""
        watcher = running(self.datacenter.pk)
        if watcher is None or not watcher.state.ready():
            return {}
        facts, seen = gather(watcher.state, self.layout, job, self.namespace(job))
        # After the look, not before: a pod that ended in between would be acted on (the job
        # ended, the pod deleted) before its follower stored the last lines. The collector hears
        # of every change the look saw (informer listeners run under the state's lock). A
        # replica whose log is still being read keeps its recorded state until it is in.
        reading = watcher.logs.drain(job.pk)
        return {key: status for key, status in observe_job(self.layout, facts, seen).items() if key not in reading}
