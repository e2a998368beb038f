"""Long-running watches of one datacenter: pods, Jobs and StatefulSets with our labels across
all namespaces, and Warning events (failed mounts and failed pod creation only show there); with
a gang scheduler also its objects: Volcano PodGroups (ours, labelled) or Kueue Workloads (Kueue's,
found by their owner: our Job, or our JobSet through the Jobs its controller made for it, which
carry our labels and the JobSet's name).

Each kind is listed once and then watched from the list's resourceVersion; every event moves
the resourceVersion on, so a dropped stream resumes where it stopped, and a 410 Gone (the
server no longer has that version) makes it list again and diff. Requests are per kind, not per
job: the cost of following 10 or 1000 jobs is the same. The state lives in memory in the
watcher process; `observe()` of the backend reads it there and nowhere else.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from .client import Api, is_transient
from .gang import Watched
from .manifests import LABEL_DATACENTER, LABEL_JOB, LABEL_JOB_ID
from .status import Warning, meta  # noqa: A004 - Kubernetes' event type, named as Kubernetes names it

log = logging.getLogger(__name__)
Obj = dict[str, Any]
POD, JOB, STATEFULSET, EVENT = "Pod", "Job", "StatefulSet", "Event"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"  # the JobSet controller's label on its Jobs and pods
# A kind the cluster does not serve (404: its CRD or API not installed) is listed again after this
# long, and said once, not at every try.
ABSENT_RECHECK_SECONDS = 300.0


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class ClusterState:
    """What the watches have seen, indexed by job id; thread-safe."""

    def __init__(self, namespace_prefix: str, extra: Watched | None = None):
        self.prefix = namespace_prefix
        self.lock = threading.RLock()
        self.objects: dict[str, dict[str, Obj]] = {POD: {}, JOB: {}, STATEFULSET: {}}
        # A gang scheduler's kind (gang.py); one its scheduler makes carries none of our labels.
        self.by_owner: set[str] = set()
        if extra is not None:
            self.objects[extra.kind] = {}
            if not extra.ours_by_label:
                self.by_owner.add(extra.kind)
        self.gone_pods: dict[str, Obj] = {}  # uid -> last state of a deleted pod
        self.warnings: dict[tuple[str, str, str], Warning] = {}  # (ns, kind, name) -> latest
        self.synced: set[str] = set()
        self.absent: set[str] = set()  # kinds the cluster does not serve
        self.dirty: set[int] = set()
        self.listeners: list[Callable[[str, str, Obj], None]] = []

    @staticmethod
    def key(obj: Obj) -> str:
        md = meta(obj)
        return md.get("uid") or f"{md.get('namespace')}/{md.get('name')}"

    @staticmethod
    def job_id(obj: Obj) -> int | None:
        try:
            return int((meta(obj).get("labels") or {})[LABEL_JOB_ID])
        except (KeyError, ValueError):
            return None

    def apply(self, kind: str, event: str, obj: Obj) -> None:
        """Record a watched change. Listeners hear of it under the lock, before any reader of the
        state can see it: the log collector must know a pod ended before the lifecycle, reading
        the same state, ends the job and deletes the pod (the replica waits for its last lines)."""
        if kind == EVENT:
            self._apply_event(obj)
            return
        if kind in self.by_owner and not (meta(obj).get("namespace") or "").startswith(self.prefix):
            return  # e.g. Kueue's Workloads of other users of the cluster
        key = self.key(obj)
        with self.lock:
            if event == "DELETED":
                self.objects[kind].pop(key, None)
                if kind == POD:
                    self.gone_pods[key] = obj
            else:
                self.objects[kind][key] = obj
                if kind == POD:
                    self.gone_pods.pop(key, None)
            self._touch(obj, kind)
            for listener in self.listeners:
                listener(kind, event, obj)

    def replace(self, kind: str, items: list[Obj]) -> None:
        """A fresh list: whatever vanished meanwhile counts as deleted."""
        fresh = {self.key(o): o for o in items}
        with self.lock:
            if kind == EVENT:
                self.warnings.clear()
            else:
                for key, old in list(self.objects[kind].items()):
                    if key not in fresh:
                        self.apply(kind, "DELETED", old)
            self.synced.add(kind)
        for obj in items:
            self.apply(kind, "ADDED", obj)

    def _touch(self, obj: Obj, kind: str = "") -> None:
        job_id = self.job_id(obj)
        if job_id is None and kind in self.by_owner:
            # E.g. Kueue's Workload carries none of our labels: its owner does, a Job of ours or
            # a JobSet (not watched: the Jobs made for it carry our labels and its name).
            ns = meta(obj).get("namespace") or ""
            for ref in meta(obj).get("ownerReferences") or []:
                owner = self.workload(JOB, ns, ref.get("name", "")) if ref.get("kind") == JOB else \
                    self._jobset_child(ns, ref.get("name", "")) if ref.get("kind") == "JobSet" else None
                job_id = self.job_id(owner) if owner else None
                if job_id is not None:
                    break
        if job_id is not None:
            self.dirty.add(job_id)

    def _jobset_child(self, namespace: str, jobset: str) -> Obj | None:
        with self.lock:
            return next((o for o in self.objects[JOB].values() if meta(o).get("namespace") == namespace
                         and (meta(o).get("labels") or {}).get(JOBSET_NAME) == jobset), None)

    def _apply_event(self, ev: Obj) -> None:
        inv = ev.get("involvedObject") or ev.get("regarding") or {}
        ns = inv.get("namespace") or ""
        kind = inv.get("kind")
        if ev.get("type") != "Warning" or not ns.startswith(self.prefix) or kind not in (POD, JOB, STATEFULSET):
            return
        with self.lock:
            self.warnings[(ns, kind, inv.get("name", ""))] = Warning(ev.get("reason") or "", ev.get("message") or "")
            for kind in (POD, JOB, STATEFULSET):
                for obj in self.objects[kind].values():
                    md = meta(obj)
                    if kind == inv["kind"] and md.get("namespace") == ns and md.get("name") == inv.get("name"):
                        self._touch(obj)

    # --- reads (the backend's observe) ------------------------------------------------------
    def ready(self) -> bool:
        with self.lock:
            return {POD, JOB, STATEFULSET} <= self.synced

    def pods_of(self, job_id: int) -> tuple[list[Obj], list[Obj]]:
        """(live pods, deleted pods) of a job."""
        with self.lock:
            live = [p for p in self.objects[POD].values() if self.job_id(p) == job_id]
            gone = [p for p in self.gone_pods.values() if self.job_id(p) == job_id]
        return live, gone

    def workload(self, kind: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            for obj in self.objects[kind].values():
                md = meta(obj)
                if md.get("namespace") == namespace and md.get("name") == name:
                    return obj
        return None

    def owned(self, kind: str, namespace: str, owner_kind: str, owner_name: str) -> Obj | None:
        """The object of `kind` in `namespace` whose owner is `owner_kind`/`owner_name`."""
        with self.lock:
            for obj in self.objects[kind].values():
                md = meta(obj)
                if md.get("namespace") == namespace and any(
                        r.get("kind") == owner_kind and r.get("name") == owner_name
                        for r in md.get("ownerReferences") or []):
                    return obj
        return None

    def warning(self, namespace: str, kind: str, name: str) -> Warning | None:
        with self.lock:
            return self.warnings.get((namespace, kind, name))

    def job_ids(self) -> set[int]:
        with self.lock:
            return {i for objs in self.objects.values() for o in objs.values() if (i := self.job_id(o)) is not None}

    def mark_dirty(self, job_id: int) -> None:
        """Have the watch loop look at the job again (something it waits for happened)."""
        with self.lock:
            self.dirty.add(job_id)

    def take_dirty(self) -> set[int]:
        with self.lock:
            out, self.dirty = self.dirty, set()
        return out

    def forget(self, job_id: int) -> None:
        """Drop what is kept of a job's deleted pods once the job is settled."""
        with self.lock:
            for key in [k for k, p in self.gone_pods.items() if self.job_id(p) == job_id]:
                del self.gone_pods[key]
            live = {(meta(p).get("namespace"), meta(p).get("name")) for p in self.objects[POD].values()}
            for k in [k for k in self.warnings if k[1] == POD and (k[0], k[2]) not in live]:
                del self.warnings[k]


class ResourceWatch(threading.Thread):
    """List, then watch from the list's resourceVersion, forever; relist on 410 Gone."""

    def __init__(self, state: ClusterState, kind: str, list_fn: Callable[..., Any], *, stop: threading.Event,
                 timeout: int, api_name: str = "", **selectors: Any):
        super().__init__(name=f"k8s-watch-{kind}", daemon=True)
        self.state, self.kind, self.list_fn, self.stop_event = state, kind, list_fn, stop
        self.timeout, self.selectors = timeout, selectors
        self.api_name = api_name or kind
        self.resource_version: str | None = None
        self.relists = 0
        self.response: urllib3.BaseHTTPResponse | None = None  # the open watch stream, cut by stop()

    def run(self) -> None:
        failures = 0
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once()
                failures = 0
            except Gone:
                log.info("watch %s: resourceVersion %s expired, listing again", self.kind, self.resource_version)
                self.resource_version = None
            except Exception as e:  # noqa: BLE001 - a watch must outlive any failure
                failures += 1
                self.stop_event.wait(self._failed(e, failures))

    def _failed(self, e: Exception, failures: int) -> float:
        """Say what went wrong (once, for a kind the cluster lacks); how long to wait."""
        if isinstance(e, ApiException) and e.status == 404:
            if self.kind not in self.state.absent:
                log.warning("the cluster does not serve %s (404): is it installed? Asked again every %.0f s",
                            self.api_name, ABSENT_RECHECK_SECONDS)
                with self.state.lock:
                    self.state.absent.add(self.kind)
                    self.state.dirty |= self.state.job_ids()  # their jobs' waiting reasons change
            self.resource_version = None
            return ABSENT_RECHECK_SECONDS
        if not is_transient(e):
            log.warning("watch %s failed: %s", self.kind, e)
            if isinstance(e, ApiException) and e.status in (401, 403):
                self.resource_version = None  # maybe fixed by the operator: start over
        return float(min(30.0, 0.5 * 2.0 ** min(failures, 6)) * random.uniform(0.5, 1.0))

    def _request(self, **params: Any) -> urllib3.BaseHTTPResponse:
        resp: urllib3.BaseHTTPResponse = self.list_fn(**self.selectors, **params, _preload_content=False,
                                                      _request_timeout=(10, self.timeout + 30))
        return resp

    def relist(self) -> None:
        resp = self._request()
        try:
            data = json.loads(resp.data)
        finally:
            resp.release_conn()
        if self.kind in self.state.absent:
            log.info("the cluster serves %s now", self.api_name)
            self.state.absent.discard(self.kind)
        self.state.replace(self.kind, data.get("items") or [])
        self.resource_version = (data.get("metadata") or {}).get("resourceVersion")
        self.relists += 1

    def watch_once(self) -> None:
        resp = self._request(watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                             timeout_seconds=self.timeout)
        self.response = resp
        try:
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]  # kubernetes' watch is untyped
                if self.stop_event.is_set():
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise ApiException(status=obj.get("code") or 500, reason=obj.get("message") or "watch error")
                rv = meta(obj).get("resourceVersion")
                if event.get("type") != "BOOKMARK":
                    self.state.apply(self.kind, event.get("type") or "MODIFIED", obj)
                if rv:
                    self.resource_version = rv
        finally:
            resp.close()
            resp.release_conn()


class ClusterWatcher:
    """The watches of one datacenter and the state they fill."""

    def __init__(self, api: Api, extra: Watched | None = None):
        self.api = api
        self.settings = api.settings
        self.state = ClusterState(self.settings.namespace_prefix, extra)
        self.stop_event = threading.Event()
        self.logs: Any = None  # the LogCollector, set by whoever starts the watcher
        self.usage: Any = None  # the UsageSampler, likewise (its thread ends with stop_event)
        selector = f"{LABEL_JOB},{LABEL_DATACENTER}={self.settings.datacenter}"
        t = self.settings.watch_timeout
        self.threads = [
            ResourceWatch(self.state, POD, api.core.list_pod_for_all_namespaces, stop=self.stop_event,
                          timeout=t, label_selector=selector),
            ResourceWatch(self.state, JOB, api.batch.list_job_for_all_namespaces, stop=self.stop_event,
                          timeout=t, label_selector=selector),
            ResourceWatch(self.state, STATEFULSET, api.apps.list_stateful_set_for_all_namespaces,
                          stop=self.stop_event, timeout=t, label_selector=selector),
            ResourceWatch(self.state, EVENT, api.core.list_event_for_all_namespaces, stop=self.stop_event,
                          timeout=t, field_selector="type=Warning"),
        ]
        if extra is not None:
            group, version, plural = extra.api
            # Ours carry our labels; a scheduler's own (Kueue's Workloads) are all listed and
            # kept only in user namespaces (ClusterState.apply).
            chosen = {"label_selector": selector} if extra.ours_by_label else {}
            self.threads.append(ResourceWatch(
                self.state, extra.kind, partial(api.custom.list_cluster_custom_object, group, version, plural),
                stop=self.stop_event, timeout=t, api_name=f"{plural}.{group}/{version}", **chosen))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        """Stop watching and following now: open streams are cut, not waited out."""
        self.stop_event.set()
        for t in self.threads:
            shutdown(t.response)
        if self.logs is not None:
            self.logs.stop()

    def wait_synced(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while not self.state.ready():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True


def shutdown(response: urllib3.BaseHTTPResponse | None) -> None:
    """Unblock a thread reading `response` (urllib3's shutdown cuts the socket under it)."""
    try:
        if response is not None and hasattr(response, "shutdown"):
            response.shutdown()
    except Exception:  # noqa: BLE001 - best effort, it may be closed already
        pass


# The watchers running in this process, by datacenter id: observe() reads their state.
_running: dict[int, ClusterWatcher] = {}
_running_lock = threading.Lock()


def register(datacenter_id: int, watcher: ClusterWatcher | None) -> None:
    with _running_lock:
        if watcher is None:
            _running.pop(datacenter_id, None)
        else:
            _running[datacenter_id] = watcher


def running(datacenter_id: int) -> ClusterWatcher | None:
    with _running_lock:
        return _running.get(datacenter_id)


def stop_all() -> None:
    """Stop every watcher of this process (tests, shutdown)."""
    with _running_lock:
        watchers = list(_running.values())
        _running.clear()
    for watcher in watchers:
        watcher.stop()
