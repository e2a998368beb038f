"""The Kubernetes backend's watcher in `manage.py watch_jobs`: a ClusterWatcher (watches + log
collector) per kubernetes datacenter, and on every tick the jobs whose objects changed are synced.

Syncing a job is the lifecycle's sync (replica rows, events, the job's state; handed in by the
watch loop) fed by `observe.observe_job` from the watched state, plus what only Kubernetes needs: creating the
trainers once the pservers are ready, putting a stuck replica's reason on the job, failing the
job when a replica stays Pending past the datacenter's pending timeout (never a silent
Pending), restart counts, and sweeping objects whose job is gone. A slower full pass over the
datacenter's active jobs catches deadlines and timeouts when nothing changes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from accounts.models import Datacenter

from ...models import TERMINAL_STATES, Job, JobEvent, JobState, Replica, ReplicaState
from ...state.transitions import set_reason, transition
from ..base import LaunchError, WatchContext, Watcher
from . import gang, manifests
from .client import MERGE_PATCH, api_for
from .informer import JOB, POD, STATEFULSET, ClusterState, ClusterWatcher, register
from .logs import LogCollector
from .observe import created, current_attempt
from .status import MOUNT_WARNINGS, PENDING_REASONS, meta, ready_replicas, replica_key

if TYPE_CHECKING:
    from .backend import KubernetesBackend

log = logging.getLogger(__name__)
# Replica reasons that explain a stuck replica: shown on the job while it waits.
PROBLEMS = PENDING_REASONS | MOUNT_WARNINGS | {"Unschedulable", "FailedCreate"} | gang.REASONS
REFRESH_SECONDS = 10.0
FULL_PASS_SECONDS = 5.0
SWEEP_SECONDS = 60.0


def _fingerprint(dc: Datacenter) -> str:
    return hashlib.sha256(f"{dc.kubeconfig}\0{json.dumps(dc.config, sort_keys=True)}".encode()).hexdigest()


class KubernetesWatcher(Watcher):
    def __init__(self, backend: str, make_backend: Callable[[Datacenter], KubernetesBackend]):
        super().__init__(backend)
        self.make_backend = make_backend  # the backend's class: the watcher sits below it
        self.watchers: dict[int, tuple[str, ClusterWatcher]] = {}
        self.next_refresh = 0.0
        self.next_full = 0.0
        self.next_sweep = 0.0
        self.advanced: dict[int, int] = {}  # job id -> the attempt whose trainers exist
        self.labelled: set[str | None] = set()
        self.starting_at: dict[int, datetime] = {}
        # job id -> (attempt, when its replicas began to wait for the cluster)
        self.pending_since: dict[int, tuple[int, datetime]] = {}

    # --- watchers --------------------------------------------------------------------------
    def refresh(self) -> None:
        """Start a ClusterWatcher per kubernetes datacenter; restart it when its config changes."""
        seen = set()
        for dc in Datacenter.objects.filter(backend=self.backend):
            seen.add(dc.pk)
            fp = _fingerprint(dc)
            current = self.watchers.get(dc.pk)
            if current and current[0] == fp:
                continue
            if current:
                current[1].stop()
            try:
                api = api_for(dc)
            except LaunchError as e:
                log.error("datacenter %s: not watching: %s", dc.name, e.message)
                self.watchers.pop(dc.pk, None)
                register(dc.pk, None)
                continue
            watcher = ClusterWatcher(api)
            watcher.logs = LogCollector(api, watcher.stop_event)
            watcher.state.listeners.append(watcher.logs.consider)
            watcher.start()
            self.watchers[dc.pk] = (fp, watcher)
            register(dc.pk, watcher)
            log.info("datacenter %s: watching the cluster", dc.name)
        for pk in set(self.watchers) - seen:
            self.watchers.pop(pk)[1].stop()
            register(pk, None)

    def start(self) -> None:
        pass  # the cluster watches start at the first tick, and restart when a datacenter changes

    def stop(self) -> None:
        for pk, (_, watcher) in list(self.watchers.items()):
            watcher.stop()
            register(pk, None)
        self.watchers.clear()

    # --- tick ------------------------------------------------------------------------------
    def tick(self, ctx: WatchContext) -> None:
        now = time.monotonic()
        if now >= self.next_refresh:
            self.next_refresh = now + REFRESH_SECONDS
            self.refresh()
        full = now >= self.next_full
        if full:
            self.next_full = now + FULL_PASS_SECONDS
        sweep = now >= self.next_sweep
        if sweep:
            self.next_sweep = now + SWEEP_SECONDS
        for dc_id, (_, watcher) in list(self.watchers.items()):
            if not watcher.state.ready():
                continue
            ids = watcher.state.take_dirty()
            if full:
                ids |= set(ctx.jobs_to_watch().filter(datacenter_id=dc_id).values_list("pk", flat=True))
            jobs = Job.objects.filter(pk__in=ids, datacenter_id=dc_id, deleting=False).select_related(
                "datacenter", "user", "registry")
            for job in jobs:
                try:
                    self.sync(watcher, job, ctx)
                except Exception:
                    log.exception("job %s: kubernetes sync failed", job.pk)
            if sweep:
                self.sweep(dc_id, watcher)

    def sync(self, watcher: ClusterWatcher, job: Job, ctx: WatchContext) -> None:
        watcher.logs.drain(job.pk)
        ctx.sync(job)
        backend = self.make_backend(job.datacenter)
        ns = backend.namespace(job)
        if job.state in (JobState.STARTING, JobState.RUNNING):
            self._advance(watcher, backend, job, ns)
            self._pending(watcher, backend, job)
        live, gone = watcher.state.pods_of(job.pk)
        self._pod_details(watcher, backend, job, live, gone, ns)
        ctx.push_logs(job)
        ctx.record_usage(job)
        if job.state in TERMINAL_STATES and not live:
            watcher.state.forget(job.pk)
            watcher.logs.forget(job.pk)
            self.advanced.pop(job.pk, None)
            self.starting_at.pop(job.pk, None)
            self.pending_since.pop(job.pk, None)

    def _advance(self, watcher: ClusterWatcher, backend: KubernetesBackend, job: Job, ns: str) -> None:
        st = backend.settings
        if not job.pservers or job.mode != "ps" or st.kubeflow or gang.enabled(st):
            return
        attempt = current_attempt(job)
        if self.advanced.get(job.pk) == attempt:
            return
        if watcher.state.workload(JOB, ns, manifests.trainer_name(job, attempt)) is not None:
            self.advanced[job.pk] = attempt
            return
        ready = ready_replicas(watcher.state.workload(STATEFULSET, ns, manifests.pserver_name(job, attempt)))
        if ready >= job.pservers and backend.advance(job, ready):
            self.advanced[job.pk] = attempt

    def _pending(self, watcher: ClusterWatcher, backend: KubernetesBackend, job: Job) -> None:
        replicas = list(job.replicas.all())
        pending = [r for r in replicas if r.state == ReplicaState.PENDING]
        problem = next((r for r in pending if r.reason in PROBLEMS), None)
        if pending:
            timeout = backend.settings.pending_timeout
            launched = self._waiting_since(job, held=any(r.reason in gang.REASONS for r in pending))
            pods = {meta(p).get("name"): p for p in watcher.state.pods_of(job.pk)[0]}
            now = timezone.now()
            for r in [problem] + pending if problem else pending:
                if r.reason in gang.REASONS:
                    continue  # waiting in the gang scheduler's queue is waiting its turn, not stuck
                pod = pods.get(r.pod)
                since = max(launched, created(pod)) if pod else launched
                if (now - since).total_seconds() > timeout:
                    reason = r.reason if r.reason in PROBLEMS or r.reason == "WaitingForPservers" else "PendingTimeout"
                    detail = f"{r.reason}: {r.message}" if r.message else r.reason or "still pending"
                    if transition(job, JobState.FAILED, reason, f"{r.name} did not start within {timeout} s. {detail}"):
                        backend.stop(job)
                    return
        if problem:
            set_reason(job, problem.reason, f"{problem.name}: {problem.message}")
        elif job.reason in PROBLEMS:
            set_reason(job, *(("Launching", "starting the replicas") if job.state == JobState.STARTING
                              else ("Running", "all replicas started")))

    def _waiting_since(self, job: Job, *, held: bool) -> datetime:
        """Since when the job's current attempt waits for the cluster: its first start, a gang
        restart's or resume's new attempt (first seen), or the last moment a gang scheduler
        still held it back (its queue is no reason to fail the job)."""
        attempt, now = current_attempt(job), timezone.now()
        known = self.pending_since.get(job.pk)
        if held or (known is not None and known[0] != attempt) or (known is None and attempt):
            self.pending_since[job.pk] = (attempt, now)
        elif known is None:
            self.pending_since[job.pk] = (attempt, self._starting_at(job))
        return self.pending_since[job.pk][1]

    def _starting_at(self, job: Job) -> datetime:
        if job.pk not in self.starting_at:
            event = JobEvent.objects.filter(job=job, state=JobState.STARTING, replica=None).order_by("created").first()
            self.starting_at[job.pk] = event.created if event else job.created
        return self.starting_at[job.pk]

    def _pod_details(self, watcher: ClusterWatcher, backend: KubernetesBackend, job: Job, pods: list[dict[str, Any]],
                     gone: list[dict[str, Any]], ns: str) -> None:
        """Container restart counts on the replicas, the highest seen (a pod that failed the job
        may be deleted before this pass: its last state is among the gone ones; a trainer's retries
        by its Job are the lifecycle's to record, with their events); our index label on each
        live pod (templates cannot carry a per-pod label), once per pod."""
        for pod in pods + gone:
            key = replica_key(pod)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            restarts = sum(cs.get("restartCount") or 0 for cs in statuses)
            if key is not None and restarts:
                Replica.objects.filter(job=job, role=key[1], index=key[2], restarts__lt=restarts).update(
                    restarts=restarts)
        for pod in pods:
            key = replica_key(pod)
            if key is None:
                continue
            md = meta(pod)
            if manifests.LABEL_INDEX not in (md.get("labels") or {}) and md.get("uid") not in self.labelled:
                self.labelled.add(md.get("uid"))
                try:
                    api = backend.api
                    api.call(api.core.patch_namespaced_pod, md["name"], ns,
                             body={"metadata": {"labels": {manifests.LABEL_INDEX: str(key[2])}}},
                             _content_type=MERGE_PATCH)
                except Exception as e:  # noqa: BLE001 - a label is a convenience, not a duty
                    log.debug("pod %s: cannot label: %s", md.get("name"), e)

    def sweep(self, dc_id: int, watcher: ClusterWatcher) -> None:
        """Objects of jobs that no longer exist, or that ended, are deleted (the safety net)."""
        ids = watcher.state.job_ids()
        if not ids:
            return
        known = dict(Job.objects.filter(pk__in=ids, datacenter_id=dc_id).values_list("pk", "state"))
        api = watcher.api
        for job_id in ids:
            state = known.get(job_id)
            if state is not None and state not in TERMINAL_STATES:
                continue
            job = Job.objects.filter(pk=job_id).select_related("datacenter", "user").first()
            if job is not None and job.deleting:
                continue  # its delete task is on it
            if job is not None:
                self.make_backend(job.datacenter).stop(job)
                continue
            for kind in (STATEFULSET, JOB, POD):
                obj = next((o for o in watcher.state.objects[kind].values() if ClusterState.job_id(o) == job_id), None)
                if obj:
                    md = meta(obj)
                    name = (md.get("labels") or {}).get(manifests.LABEL_JOB)
                    root = api.raw(api.core.read_namespaced_config_map, name, md["namespace"]) if name else None
                    if root and (root["metadata"].get("labels") or {}).get(manifests.LABEL_JOB_ID) == str(job_id):
                        api.delete(api.core.delete_namespaced_config_map, name, md["namespace"])
                    break
