"""The emulated API server's state: objects with uid and resourceVersion, label and field
selectors, history for watches (compacted: 410 Gone), ownerReference cascades, pod logs.
Used from the server's event loop and from the test thread alike (one lock)."""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import re
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import kmock

Obj = dict[str, Any]
KINDS = {  # plural -> (apiVersion, kind, namespaced)
    "namespaces": ("v1", "Namespace", False), "pods": ("v1", "Pod", True), "services": ("v1", "Service", True),
    "configmaps": ("v1", "ConfigMap", True), "secrets": ("v1", "Secret", True),
    "resourcequotas": ("v1", "ResourceQuota", True), "events": ("v1", "Event", True),
    "persistentvolumeclaims": ("v1", "PersistentVolumeClaim", True),
    "statefulsets": ("apps/v1", "StatefulSet", True), "jobs": ("batch/v1", "Job", True),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy", True),
    "podgroups": ("scheduling.volcano.sh/v1beta1", "PodGroup", True),
    "workloads": ("kueue.x-k8s.io/v1beta1", "Workload", True),
    "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet", True),
}


def now(delta: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(when: datetime | None = None) -> str:
    """An RFC3339Nano stamp the way the kubelet writes it (trailing zeros trimmed)."""
    when = when or datetime.now(UTC)
    frac = f"{when.microsecond * 1000:09d}".rstrip("0")
    return when.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


class Gone(Exception):
    pass


def _match_labels(selector: str, labels: dict[str, str]) -> bool:
    for req in re.split(r",(?![^()]*\))", selector or ""):
        req = req.strip()
        if not req:
            continue
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", req):
            values = {v.strip() for v in m.group(3).split(",")}
            if (labels.get(m.group(1)) in values) != (m.group(2) == "in"):
                return False
        elif "!=" in req:
            k, v = req.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in req:
            k, v = req.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif req.startswith("!"):
            if req[1:] in labels:
                return False
        elif req not in labels:
            return False
    return True


def _match_fields(selector: str, obj: Obj) -> bool:
    for req in (selector or "").split(","):
        if not req.strip():
            continue
        neg = "!=" in req
        k, v = req.split("!=" if neg else "=", 1)
        cur: Any = obj
        for part in k.strip().split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if (str(cur if cur is not None else "") == v.strip()) == neg:
            return False
    return True
# What the API server checks of every new object's name and labels (422 Invalid otherwise).
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")
NAME_RULES = {"services": DNS_1035_LABEL, "namespaces": DNS_1123_LABEL}


def check_metadata(plural: str, md: Obj) -> None:
    name = md["name"]
    rule = NAME_RULES.get(plural, DNS_SUBDOMAIN)
    if len(name) > 253 or not rule.fullmatch(name):
        raise kmock.KubernetesError(422, "Invalid", f'{plural} "{name}" is invalid: metadata.name')
    for key, value in (md.get("labels") or {}).items():
        if not LABEL_VALUE.fullmatch(value):
            raise kmock.KubernetesError(422, "Invalid", f'{plural} "{name}" is invalid: metadata.labels[{key}]')


class Store:
    """Objects and their history; used from the server's loop and the test thread alike."""

    def __init__(self):
        self.lock = threading.RLock()
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.history: list[tuple[int, str, str, Obj]] = []  # (rv, plural, type, object)
        self.compacted = 0  # watches from a resourceVersion below this get 410 Gone
        self.rv = itertools.count(100)
        self.last_rv = 99
        self.logs: dict[tuple[str, str], list[tuple[datetime, str]]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiters: set[asyncio.Event] = set()
        self.stream_generation = 0
        # Keep foreground-deleted owners and deleted pods Terminating until finish_deletions().
        self.slow_deletion = False
        # Controllers told of every created or changed object (plural, object): the JobSet one.
        self.controllers: list[Callable[[str, Obj], None]] = []

    # --- change notification --------------------------------------------------------------
    def _notify(self) -> None:
        if self.loop is None:
            return
        for ev in list(self.waiters):
            self.loop.call_soon_threadsafe(ev.set)

    def _record(self, plural: str, kind: str, obj: Obj) -> None:
        rv = next(self.rv)
        self.last_rv = rv
        obj["metadata"]["resourceVersion"] = str(rv)
        self.history.append((rv, plural, kind, copy.deepcopy(obj)))
        self._notify()

    # --- CRUD -------------------------------------------------------------------------------
    def create(self, plural: str, ns: str | None, body: Obj) -> Obj:
        api_version, kind, namespaced = KINDS[plural]
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
        ns = (ns or md.get("namespace")) if namespaced else None
        check_metadata(plural, md)
        key = (plural, ns or "", md["name"])
        with self.lock:
            if key in self.objects:
                raise kmock.KubernetesError(409, "AlreadyExists", f'{plural} "{md["name"]}" already exists')
            if namespaced and ("namespaces", "", ns) not in self.objects:
                raise kmock.KubernetesError(404, "NotFound", f'namespaces "{ns}" not found')
            if namespaced:
                md["namespace"] = ns
            md.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            if kind == "Secret" and "stringData" in obj:
                data = obj.setdefault("data", {})
                for k, v in obj.pop("stringData").items():
                    data[k] = base64.b64encode(v.encode()).decode()
            self.objects[key] = obj
            self._record(plural, "ADDED", obj)
            out = copy.deepcopy(obj)
            self._run_controllers(plural, obj)
            return out

    def get(self, plural: str, ns: str | None, name: str) -> Obj:
        with self.lock:
            obj = self.objects.get((plural, ns or "", name))
            if obj is None:
                raise kmock.KubernetesError(404, "NotFound", f'{plural} "{name}" not found')
            return copy.deepcopy(obj)

    def phase(self, ns: str, pod: str) -> str | None:
        """The pod's status.phase, None when there is no such pod: without copying the pod, for
        the log streams, which all read it on every change of the store."""
        with self.lock:
            obj = self.objects.get(("pods", ns, pod))
            return None if obj is None else (obj.get("status") or {}).get("phase", "")

    def find(self, plural: str, ns: str | None = None, labels: str = "", fields: str = "") -> list[Obj]:
        with self.lock:
            return [copy.deepcopy(o) for (p, n, _), o in self.objects.items()
                    if p == plural and (ns is None or n == ns)
                    and _match_labels(labels, o["metadata"].get("labels") or {}) and _match_fields(fields, o)]

    def update(self, plural: str, ns: str | None, name: str, change: Callable[[Obj], None]) -> Obj:
        with self.lock:
            obj = self.objects.get((plural, ns or "", name))
            if obj is None:
                raise kmock.KubernetesError(404, "NotFound", f'{plural} "{name}" not found')
            change(obj)
            self._record(plural, "MODIFIED", obj)
            self._maybe_finalize(plural, obj)
            out = copy.deepcopy(obj)
            self._run_controllers(plural, obj)
            return out

    def _run_controllers(self, plural: str, obj: Obj) -> None:
        if (plural, obj["metadata"].get("namespace") or "", obj["metadata"]["name"]) in self.objects:
            for controller in self.controllers:
                controller(plural, copy.deepcopy(obj))

    def replace(self, plural: str, ns: str | None, name: str, body: Obj) -> Obj:
        def change(obj: Obj) -> None:
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != obj["metadata"]["resourceVersion"]:
                raise kmock.KubernetesError(409, "Conflict", "the object has been modified")
            keep = {k: obj["metadata"][k] for k in ("uid", "creationTimestamp", "namespace") if k in obj["metadata"]}
            obj.clear()
            obj.update(copy.deepcopy(body))
            obj["metadata"].update(keep)
        return self.update(plural, ns, name, change)

    def patch(self, plural: str, ns: str | None, name: str, patch: Obj) -> Obj:
        def merge(dst: Obj, src: Obj) -> None:
            for k, v in src.items():
                if v is None:
                    dst.pop(k, None)
                elif isinstance(v, dict) and isinstance(dst.get(k), dict):
                    merge(dst[k], v)
                else:
                    dst[k] = copy.deepcopy(v)
        obj = self.update(plural, ns, name, lambda obj: merge(obj, patch))
        self._controllers(plural, obj)
        return obj

    def _controllers(self, plural: str, obj: Obj) -> None:
        """What the Job and StatefulSet controllers do at once on a changed spec: a suspended
        Job's pods are deleted (gracefully), a StatefulSet scaled down loses its highest ordinals."""
        uid, spec = obj["metadata"]["uid"], obj.get("spec") or {}
        if plural == "jobs" and spec.get("suspend"):
            self.update(plural, obj["metadata"]["namespace"], obj["metadata"]["name"], lambda o: o.setdefault(
                "status", {}).update(active=0, conditions=[
                    {"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended"}]))
            keep = -1
        elif plural == "statefulsets":
            keep = int(spec.get("replicas") or 0)
        else:
            return
        with self.lock:
            for (p, n, name), pod in list(self.objects.items()):
                refs = pod["metadata"].get("ownerReferences") or []
                ordinal = name.rsplit("-", 1)[-1]
                if p == "pods" and any(r.get("uid") == uid for r in refs) and (
                        keep < 0 or (ordinal.isdigit() and int(ordinal) >= keep)):
                    self.delete(p, n, name)

    def delete(self, plural: str, ns: str | None, name: str, propagation: str = "Background") -> Obj:
        with self.lock:
            key = (plural, ns or "", name)
            obj = self.objects.get(key)
            if obj is None:
                raise kmock.KubernetesError(404, "NotFound", f'{plural} "{name}" not found')
            if obj["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(obj)
            uid = obj["metadata"]["uid"]
            if plural == "pods":
                self._delete_pod(key, obj)
            elif propagation == "Foreground":
                obj["metadata"].update(deletionTimestamp=now(), finalizers=["foregroundDeletion"])
                self._record(plural, "MODIFIED", obj)
                self._delete_dependents(uid, "Foreground")
                if not self.slow_deletion:
                    self._remove(key)
            else:
                self._remove(key)
                if propagation != "Orphan":
                    self._delete_dependents(uid, "Background")
            return copy.deepcopy(obj)

    def _delete_pod(self, key: tuple[str, str, str], obj: Obj) -> None:
        """Graceful, as the API server deletes a pod: first marked (deletionTimestamp, a MODIFIED
        event; the job controller's tracking finalizer holds a Job's pods, failed ones too), then
        gone once the kubelet and the controller let go: at once, or at finish_deletions() while
        `slow_deletion` is on."""
        md = obj["metadata"]
        md.update(deletionTimestamp=now(), deletionGracePeriodSeconds=30)
        if not self.slow_deletion:
            self._record("pods", "MODIFIED", obj)
            self._remove(key)
            return
        md["finalizers"] = [*(md.get("finalizers") or []), "batch.kubernetes.io/job-tracking"]
        self._record("pods", "MODIFIED", obj)

    def _delete_dependents(self, uid: str, propagation: str) -> None:
        for (p, n, name), o in list(self.objects.items()):
            owned = any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
            if owned and (p, n, name) in self.objects:
                self.delete(p, n, name, propagation)

    def _remove(self, key: tuple[str, str, str]) -> None:
        obj = self.objects.pop(key)
        self._record(key[0], "DELETED", obj)

    def _maybe_finalize(self, plural: str, obj: Obj) -> None:
        md = obj["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            self._remove((plural, md.get("namespace") or "", md["name"]))

    def finish_deletions(self) -> None:
        """What the garbage collector does once dependents are gone: drop the finalizers."""
        with self.lock:
            for (p, n, name), o in list(self.objects.items()):
                if o["metadata"].get("deletionTimestamp"):
                    self.update(p, n, name, lambda obj: obj["metadata"].update(finalizers=[]))

    def compact(self) -> None:
        """Forget history, as etcd compaction does: older resourceVersions now get 410 Gone."""
        with self.lock:
            self.compacted = self.last_rv + 1
            self.history.clear()

    def expire_watches(self) -> None:
        """Make every open watch's resourceVersion too old (a write, then compaction) and cut
        the streams: each must list again."""
        with self.lock:
            self._record("namespaces", "MODIFIED", {"metadata": {"name": "-compaction-marker-"}})
            self.compact()
        self.stream_generation += 1
        self._notify()

    def events_since(self, rv: int, plural: str) -> list[tuple[int, str, Obj]]:
        with self.lock:
            if rv < self.compacted - 1:
                raise Gone()
            return [(r, t, o) for r, p, t, o in self.history if r > rv and p == plural]
