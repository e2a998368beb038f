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
import contextlib
import logging
import re
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
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

from .k8s_rbac import Authorizer, attributes  # noqa: E402
from .k8s_store import KINDS, Gone, Obj, Store, _match_fields, _match_labels, now, stamp  # noqa: E402,F401

logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class EmulatedCluster:
    """The emulator running in a background thread: `.url`, `.kubeconfig()`, `.store`, `.kmock`.

    With `rbac` (k8s_rbac.py) every request is authorized as the API server would, by the roles
    the service account is bound to: a request they do not allow is answered 403 Forbidden and
    recorded in `.denied`. The API groups in `.installed` are served (and discovered, as
    GET /apis/<group>/<version> lists them); `uninstall()` takes one away, as a cluster without
    that CRD or aggregated API answers 404 for its paths."""

    def __init__(self, rbac: Authorizer | None = None):
        self.store = Store()
        self.kmock = kmock.KubernetesScaffold()
        self.rbac = rbac
        self.denied: list[str] = []
        self.installed = {_group(api_version) for api_version, _, _ in KINDS.values()}
        if rbac is not None:  # first: every request, whatever reaction a test adds later
            self.kmock[lambda req: True] << self._authorize
        # Unfiltered: kmock checks a request against a filtered view by running the filter over
        # every request recorded so far, which made each request cost more than the one before.
        self.kmock.fallback << self._dispatch
        for plural, (api_version, kind, namespaced) in KINDS.items():
            info = self.kmock.resources[f"{api_version}/{plural}"]
            info.kind, info.namespaced = kind, namespaced
            info.verbs = {"get", "list", "watch", "create", "update", "patch", "delete"}
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

    # --- API groups and authorization --------------------------------------------------------
    def _served(self, request: kmock.Request) -> bool:
        res = request.resource
        return res is not None and res.plural in KINDS and res.group == _group(KINDS[res.plural][0])

    def uninstall(self, group: str) -> None:
        """The cluster no longer has this API group (its CRDs deleted, its aggregated API gone)."""
        self.installed.discard(group)
        for plural, (api_version, _, _) in KINDS.items():
            if _group(api_version) == group:
                del self.kmock.resources[f"{api_version}/{plural}"]

    async def _authorize(self, request: kmock.Request) -> Any:
        res = request.resource
        if res is None or not res.plural:
            raise NotImplementedError  # discovery: system:discovery grants it to everyone; go on
        want = attributes(request.method.value, res.group or "", res.plural, request.namespace, request.name,
                          request.subresource, dict(request.params))
        if self.rbac is not None and self.rbac.allows(want):
            raise NotImplementedError  # allowed: the next reaction answers
        self.denied.append(f"{request.method.value} {request.url.path}: {want}")
        user = self.rbac.user if self.rbac is not None else "anonymous"
        raise kmock.KubernetesError(403, "Forbidden", f'{res.plural} is forbidden: User "{user}" {want}', {})

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

    @contextlib.contextmanager
    def hang(self, method: str, path: str | re.Pattern[str], answer: Any) -> Iterator[list[kmock.Request]]:
        """Requests of `method` whose path matches the regex `path` get no answer while the block
        runs, then `answer`: a server that accepts a request and hangs. Yields the requests held."""
        held: list[kmock.Request] = []
        release = asyncio.run_coroutine_threadsafe(_new_event(), self.store.loop).result(5)

        async def react(request: kmock.Request):
            held.append(request)
            await release.wait()
            return answer

        self.kmock[kmock.method(method.upper()), re.compile(path)] << react
        try:
            yield held
        finally:
            self.store.loop.call_soon_threadsafe(release.set)

    def drop_streams(self) -> None:
        """Cut every open watch and log stream, as a restarted API server or a proxy would."""
        self.store.stream_generation += 1
        self.store._notify()

    # --- requests ---------------------------------------------------------------------------
    async def _dispatch(self, request: kmock.Request) -> Any:
        import time

        if not self._served(request):
            raise NotImplementedError  # not one of ours (discovery): kmock's scaffold answers
        path = request.url.path + (f"?{request.url.query_string}" if request.url.query_string else "")
        self.requests.append((time.monotonic(), str(request.method.value), path))
        plural, ns, name, sub = request.resource.plural, request.namespace, request.name, request.subresource
        params, method, store = request.params, request.method.value.upper(), self.store
        if request.resource.group not in self.installed:
            raise kmock.KubernetesError(404, "NotFound", "the server could not find the requested resource", {})
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

    async def _stream_watch(self, plural: str, ns: str | None, params: dict) -> AsyncIterator[Any]:
        yield b""  # send the headers now, even if nothing happens
        labels, fields = params.get("labelSelector", ""), params.get("fieldSelector", "")
        timeout = float(params.get("timeoutSeconds") or 3600)

        def wanted(obj: Obj) -> bool:
            return ((ns is None or obj["metadata"].get("namespace") == ns)
                    and _match_labels(labels, obj["metadata"].get("labels") or {}) and _match_fields(fields, obj))

        changes = _Changes(self.store, timeout)
        try:
            rv_param = params.get("resourceVersion")
            if rv_param in (None, "", "0"):
                with self.store.lock:
                    listed, pos = self.store.find(plural, ns, labels, fields), self.store.last_rv
                for obj in listed:
                    yield {"type": "ADDED", "object": obj}
            else:
                pos = int(rv_param)
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
                if not await changes.wait():
                    return
        finally:
            changes.close()

    async def _stream_log(self, ns: str, name: str, params: dict) -> AsyncIterator[bytes]:
        yield b""
        since = params.get("sinceTime")
        since_dt = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
        follow, stamps = params.get("follow") == "true", params.get("timestamps") == "true"
        sent = 0
        changes = _Changes(self.store, 3600)
        try:
            while True:
                phase = self.store.phase(ns, name)
                done = phase is None or phase in ("Succeeded", "Failed")
                # A slice, counted as taken: lines appended while this one is sent come next time.
                new = self.store.logs.get((ns, name), [])[sent:]
                sent += len(new)
                for when, text in new:
                    if since_dt is None or when >= since_dt:
                        yield (f"{stamp(when)} {text}\n" if stamps else f"{text}\n").encode()
                if not follow or done or not await changes.wait():
                    return
        finally:
            changes.close()


async def _new_event() -> asyncio.Event:
    return asyncio.Event()  # made in the emulator's loop, which waits on it


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


class _Changes:
    """Wakes a stream on every store change until `timeout` passes or streams are dropped.
    It listens from the moment it is made, so a change that lands between a stream's read
    of the store and its wait still wakes it."""

    def __init__(self, store, timeout: float):
        self.store, self.generation = store, store.stream_generation
        self.event = asyncio.Event()
        self.deadline = asyncio.get_running_loop().time() + timeout
        store.waiters.add(self.event)

    async def wait(self) -> bool:
        """True after a change; False when the stream should end."""
        left = self.deadline - asyncio.get_running_loop().time()
        if left <= 0 or self.store.stream_generation != self.generation:
            return False
        try:
            await asyncio.wait_for(self.event.wait(), left)
        except TimeoutError:
            return False
        self.event.clear()
        return self.store.stream_generation == self.generation

    def close(self) -> None:
        self.store.waiters.discard(self.event)
