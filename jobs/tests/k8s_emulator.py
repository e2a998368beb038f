"""A stateful Kubernetes API server for tests, over real HTTP, built on kmock.

kmock (PyPI) serves the HTTP, parses Kubernetes URLs, records every request and lets a test put
reactions in front (faults: 500s, 409s, slow answers). Its own emulator keeps objects but not
resourceVersions, selectors, watch history or garbage collection, which the backend depends on,
so the state lives here: objects with uid/resourceVersion, label and field selectors, watches
that resume from a resourceVersion and answer 410 Gone once history is compacted, ownerReference
cascades (background and foreground), and pod logs with follow/timestamps/sinceTime.

The tests play the controllers and kubelets: `run_statefulset`, `run_job` make pods;
`pod_running`, `pod_succeeded`, `pod_waiting`, ... move them on; `log()` writes their output.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import re
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import kmock
import yaml
from kmock._internal import parsing as _kmock_parsing

_parse_path = _kmock_parsing.parse_path


def _parse_path_with_namespaces(path: str) -> _kmock_parsing.ParsedPath:
    """kmock 0.8 reads /api/v1/namespaces[/<name>] as a namespace segment with nothing after
    it (and fails); those paths are the cluster-scoped Namespace resource itself."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) in (3, 4):
        return _kmock_parsing.ParsedPath("", "v1", "namespaces", None, parts[3] if len(parts) == 4 else None, None)
    return _parse_path(path)


_kmock_parsing.parse_path = _parse_path_with_namespaces

Obj = dict[str, Any]
logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
KINDS = {  # plural -> (apiVersion, kind, namespaced)
    "namespaces": ("v1", "Namespace", False), "pods": ("v1", "Pod", True), "services": ("v1", "Service", True),
    "configmaps": ("v1", "ConfigMap", True), "secrets": ("v1", "Secret", True),
    "resourcequotas": ("v1", "ResourceQuota", True), "events": ("v1", "Event", True),
    "persistentvolumeclaims": ("v1", "PersistentVolumeClaim", True),
    "statefulsets": ("apps/v1", "StatefulSet", True), "jobs": ("batch/v1", "Job", True),
    "paddlejobs": ("kubeflow.org/v1", "PaddleJob", True),
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
        self.slow_deletion = False  # keep foreground-deleted owners Terminating until finish_deletions()

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
                import base64

                data = obj.setdefault("data", {})
                for k, v in obj.pop("stringData").items():
                    data[k] = base64.b64encode(v.encode()).decode()
            self.objects[key] = obj
            self._record(plural, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, plural: str, ns: str | None, name: str) -> Obj:
        with self.lock:
            obj = self.objects.get((plural, ns or "", name))
            if obj is None:
                raise kmock.KubernetesError(404, "NotFound", f'{plural} "{name}" not found')
            return copy.deepcopy(obj)

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
            return copy.deepcopy(obj)

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
        return self.update(plural, ns, name, lambda obj: merge(obj, patch))

    def delete(self, plural: str, ns: str | None, name: str, propagation: str = "Background") -> Obj:
        with self.lock:
            key = (plural, ns or "", name)
            obj = self.objects.get(key)
            if obj is None:
                raise kmock.KubernetesError(404, "NotFound", f'{plural} "{name}" not found')
            if obj["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(obj)
            uid = obj["metadata"]["uid"]
            if propagation == "Foreground":
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

    def _delete_dependents(self, uid: str, propagation: str) -> None:
        for (p, n, name), o in list(self.objects.items()):
            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or []):
                if (p, n, name) in self.objects:
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


class EmulatedCluster:
    """The emulator running in a background thread: `.url`, `.kubeconfig()`, `.store`, `.kmock`."""

    def __init__(self):
        self.store = Store()
        self.kmock = kmock.KubernetesScaffold()
        self.kmock.fallback[lambda req: req.resource is not None and req.resource.plural in KINDS] << self._dispatch
        self.requests: list[tuple[float, str, str]] = []  # (monotonic time, method, path?query)
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="k8s-emulator", daemon=True)
        self.url = ""

    # --- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the Kubernetes emulator did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self.store.loop and self._stop:
            self.store.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self.store.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.kmock, kmock.Server(self.kmock) as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()
            self.drop_streams()
            await asyncio.sleep(0.1)

    def kubeconfig(self) -> str:
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "test-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]})

    # --- faults -----------------------------------------------------------------------------
    def fail(self, method: str, path: str, status: int = 500, times: int = 1, *, after: bool = False) -> None:
        """The next `times` requests of `method` whose path matches the regex `path` answer
        `status`. With after=True the request is carried out first (the answer is lost)."""
        left = [times]

        async def react(request: kmock.Request):
            if left[0] <= 0:
                return NotImplemented  # kmock disables this reaction: later requests pass
            left[0] -= 1
            if after:
                await self._dispatch(request)
            raise kmock.KubernetesError(status, "InternalError" if status >= 500 else "Conflict", "injected fault")

        self.kmock[kmock.method(method.upper()), re.compile(path)] << react

    def drop_streams(self) -> None:
        """Cut every open watch and log stream, as a restarted API server or a proxy would."""
        self.store.stream_generation += 1
        self.store._notify()

    # --- requests ---------------------------------------------------------------------------
    async def _dispatch(self, request: kmock.Request) -> Any:
        import time

        path = request.url.path + (f"?{request.url.query_string}" if request.url.query_string else "")
        self.requests.append((time.monotonic(), str(request.method.value), path))
        plural, ns, name, sub = request.resource.plural, request.namespace, request.name, request.subresource
        params, method, store = request.params, request.method.value.upper(), self.store
        if sub == "log":
            store.get("pods", ns, name)
            return self._stream_log(ns, name, params)
        if method == "GET" and params.get("watch") in ("true", "1"):
            return self._stream_watch(plural, ns, params)
        if method == "GET" and name:
            return store.get(plural, ns, name)
        if method == "GET":
            items = store.find(plural, ns, params.get("labelSelector", ""), params.get("fieldSelector", ""))
            return {"apiVersion": KINDS[plural][0], "kind": KINDS[plural][1] + "List",
                    "metadata": {"resourceVersion": str(store.last_rv)}, "items": items}
        if method == "POST":
            return store.create(plural, ns, request.data or {})
        if method == "PUT":
            return store.replace(plural, ns, name, request.data or {})
        if method == "PATCH":
            return store.patch(plural, ns, name, request.data or {})
        if method == "DELETE":
            body = request.data if isinstance(request.data, dict) else {}
            propagation = body.get("propagationPolicy") or params.get("propagationPolicy") or "Background"
            store.delete(plural, ns, name, propagation)
            return {"apiVersion": "v1", "kind": "Status", "status": "Success", "metadata": {}}
        raise kmock.KubernetesError(405, "MethodNotAllowed", method)

    async def _changes(self, timeout: float) -> AsyncIterator[None]:
        """Yields on every store change until `timeout` passes or streams are dropped."""
        ev = asyncio.Event()
        gen = self.store.stream_generation
        self.store.waiters.add(ev)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while self.store.stream_generation == gen:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return
                try:
                    await asyncio.wait_for(ev.wait(), left)
                except TimeoutError:
                    return
                ev.clear()
                if self.store.stream_generation != gen:
                    return
                yield None
        finally:
            self.store.waiters.discard(ev)

    async def _stream_watch(self, plural: str, ns: str | None, params: dict) -> AsyncIterator[Any]:
        yield b""  # send the headers now, even if nothing happens
        labels, fields = params.get("labelSelector", ""), params.get("fieldSelector", "")
        timeout = float(params.get("timeoutSeconds") or 3600)

        def wanted(obj: Obj) -> bool:
            return ((ns is None or obj["metadata"].get("namespace") == ns)
                    and _match_labels(labels, obj["metadata"].get("labels") or {}) and _match_fields(fields, obj))

        rv_param = params.get("resourceVersion")
        if rv_param in (None, "", "0"):
            for obj in self.store.find(plural, ns, labels, fields):
                yield {"type": "ADDED", "object": obj}
            pos = self.store.last_rv
        else:
            pos = int(rv_param)
        pending = self._changes(timeout)
        while True:
            try:
                events = self.store.events_since(pos, plural)
            except Gone:
                yield {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                   "code": 410, "reason": "Expired",
                                                   "message": f"too old resource version: {pos}"}}
                return
            for rv, type_, obj in events:
                pos = rv
                if wanted(obj):
                    yield {"type": type_, "object": obj}
            try:
                await anext(pending)
            except StopAsyncIteration:
                return

    async def _stream_log(self, ns: str, name: str, params: dict) -> AsyncIterator[bytes]:
        yield b""
        since = params.get("sinceTime")
        since_dt = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
        follow, stamps = params.get("follow") == "true", params.get("timestamps") == "true"
        sent = 0
        pending = self._changes(3600)
        while True:
            try:
                pod = self.store.get("pods", ns, name)
            except kmock.KubernetesError:
                pod = None
            done = pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            lines = self.store.logs.get((ns, name), [])
            for when, text in lines[sent:]:
                if since_dt is None or when >= since_dt:
                    yield (f"{stamp(when)} {text}\n" if stamps else f"{text}\n").encode()
            sent = len(lines)
            if not follow or done:
                return
            try:
                await anext(pending)
            except StopAsyncIteration:
                return
