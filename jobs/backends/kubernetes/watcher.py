"""The Kubernetes backend's watcher in `manage.py watch_jobs`: per kubernetes datacenter a
ClusterWatcher (watches, log collector, usage sampler), and on every tick the jobs whose objects
changed are synced.

Syncing a job is the lifecycle's (replica rows, events, the job's state, its pending timeout and
reasons; handed in by the watch loop), fed by observe.py from the watched state. What only the
cluster needs is done here: a Building job's runtime image build is followed (runtime.py's
BuildFollower: its log copied, every POLL_SECONDS while it runs; once it ended its push
credentials deleted and the image recorded) before the lifecycle hears how it went, the job's
layout takes it a step on once it may (the plain layout's trainers once the pservers are
ready), each new pod is handed to the labeller (labels.py: its index label, from a thread of
its own), and objects whose job is gone are swept. A slower full pass over the datacenter's
active jobs catches what changes with time alone (deadlines, pending timeouts).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time

from accounts.models import Datacenter

from ...models import TERMINAL_STATES, Job, JobState
from ..base import LaunchError, WatchContext, Watcher
from . import manifests, root, runtime
from .client import api_for
from .context import ClusterContext, context_of
from .informer import JOB, POD, STATEFULSET, ClusterState, ClusterWatcher, register
from .labels import PodLabeller
from .layouts import Layout, layout_for
from .logs import LogCollector
from .observe import current_attempt
from .status import meta
from .usage import UsageSampler

log = logging.getLogger(__name__)
REFRESH_SECONDS = 10.0
FULL_PASS_SECONDS = 5.0
SWEEP_SECONDS = 60.0


def _fingerprint(dc: Datacenter) -> str:
    return hashlib.sha256(f"{dc.kubeconfig}\0{json.dumps(dc.config, sort_keys=True)}".encode()).hexdigest()


class Cluster:
    """One datacenter as the watcher follows it."""

    def __init__(self, ctx: ClusterContext, fingerprint: str):
        self.ctx, self.fingerprint = ctx, fingerprint
        self.layout: Layout = layout_for(ctx.settings)
        self.watcher = ClusterWatcher(ctx.api, self.layout.gang.watched)
        self.watcher.logs = LogCollector(ctx.api, self.watcher.stop_event, on_read=self.watcher.state.mark_dirty)
        self.watcher.state.listeners.append(self.watcher.logs.consider)
        self.watcher.usage = UsageSampler(ctx.api, self.watcher.stop_event)
        self.builds = runtime.BuildFollower(ctx)
        self.labeller = PodLabeller(ctx.api, self.watcher.stop_event)  # its thread ends with the watches

    def start(self) -> None:
        self.watcher.start()
        self.watcher.usage.start()
        self.labeller.start()


class KubernetesWatcher(Watcher):
    def __init__(self, backend: str):
        super().__init__(backend)
        self.clusters: dict[int, Cluster] = {}
        self.next_refresh = 0.0
        self.next_full = 0.0
        self.next_builds = 0.0
        self.next_sweep = 0.0

    @property
    def watchers(self) -> dict[int, tuple[str, ClusterWatcher]]:
        return {pk: (c.fingerprint, c.watcher) for pk, c in self.clusters.items()}

    # --- watchers --------------------------------------------------------------------------
    def refresh(self) -> None:
        """Follow each kubernetes datacenter; start over when its config changes."""
        seen = set()
        for dc in Datacenter.objects.filter(backend=self.backend):
            seen.add(dc.pk)
            fp = _fingerprint(dc)
            current = self.clusters.get(dc.pk)
            if current and current.fingerprint == fp:
                continue
            if current:
                current.watcher.stop()
            try:
                cluster = Cluster(context_of(api_for(dc)), fp)
            except LaunchError as e:
                log.error("datacenter %s: not watching: %s", dc.name, e.message)
                self.clusters.pop(dc.pk, None)
                register(dc.pk, None)
                continue
            cluster.start()
            self.clusters[dc.pk] = cluster
            register(dc.pk, cluster.watcher)
            log.info("datacenter %s: watching the cluster", dc.name)
        for pk in set(self.clusters) - seen:
            self.clusters.pop(pk).watcher.stop()
            register(pk, None)

    def start(self) -> None:
        pass  # the cluster watches start at the first tick, and restart when a datacenter changes

    def stop(self) -> None:
        for pk, cluster in list(self.clusters.items()):
            cluster.watcher.stop()
            register(pk, None)
        self.clusters.clear()

    # --- tick ------------------------------------------------------------------------------
    def tick(self, ctx: WatchContext) -> None:
        now = time.monotonic()
        if now >= self.next_refresh:
            self.next_refresh = now + REFRESH_SECONDS
            self.refresh()
        full, builds, sweep = now >= self.next_full, now >= self.next_builds, now >= self.next_sweep
        if full:
            self.next_full = now + FULL_PASS_SECONDS
        if builds:
            self.next_builds = now + runtime.POLL_SECONDS
        if sweep:
            self.next_sweep = now + SWEEP_SECONDS
        for dc_id, cluster in list(self.clusters.items()):
            if not cluster.watcher.state.ready():
                continue
            ids = cluster.watcher.state.take_dirty()
            if full:
                ids |= set(ctx.jobs_to_watch().filter(datacenter_id=dc_id).values_list("pk", flat=True))
            if builds:  # their logs grow with no change to a watched object
                ids |= runtime.unfinished_builds(cluster.watcher.state)
            jobs = Job.objects.filter(pk__in=ids, datacenter_id=dc_id, deleting=False).select_related(
                "datacenter", "user", "registry")
            for job in jobs:
                try:
                    self.sync(cluster, job, ctx)
                except Exception:
                    log.exception("job %s: kubernetes sync failed", job.pk)
            if sweep:
                self.sweep(dc_id, cluster)

    def sync(self, cluster: Cluster, job: Job, ctx: WatchContext) -> None:
        state = cluster.watcher.state
        if job.state == JobState.BUILDING:  # before the lifecycle hears of the build's end
            cluster.builds.follow(job, state)
        else:
            cluster.builds.forget(job.pk)
        ctx.sync(job)
        ns = cluster.ctx.job_namespace(job)
        if job.state in (JobState.STARTING, JobState.RUNNING):
            # From the watched state, in memory: an API call only once there is a step to take.
            cluster.layout.advance(cluster.ctx, job, ns, current_attempt(job), state,
                                   lambda: runtime.pod_options(cluster.ctx, job))
        live, _ = state.pods_of(job.pk)
        cluster.labeller.consider(live, ns)
        ctx.push_logs(job)
        ctx.record_usage(job)
        if job.state in TERMINAL_STATES and not live:
            state.forget(job.pk)
            cluster.watcher.logs.forget(job.pk)
            cluster.labeller.forget(job.pk)

    def sweep(self, dc_id: int, cluster: Cluster) -> None:
        """Objects of jobs that no longer exist, or that ended, are deleted (the safety net)."""
        state = cluster.watcher.state
        ids = state.job_ids()
        if not ids:
            return
        known = dict(Job.objects.filter(pk__in=ids, datacenter_id=dc_id).values_list("pk", "state"))
        for job_id in ids:
            if known.get(job_id) not in (None, *TERMINAL_STATES):
                continue
            job = Job.objects.filter(pk=job_id).select_related("datacenter", "user").first()
            if job is not None:
                if not job.deleting:  # else its delete task is on it
                    root.stop(cluster.ctx, job, cluster.ctx.job_namespace(job))
                continue
            for kind in (STATEFULSET, JOB, POD):
                obj = next((o for o in state.objects[kind].values() if ClusterState.job_id(o) == job_id), None)
                if obj:
                    md = meta(obj)
                    name = (md.get("labels") or {}).get(manifests.LABEL_JOB)
                    if name:
                        root.sweep(cluster.ctx, name, md["namespace"], job_id)
                    break
