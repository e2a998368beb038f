"""Pod logs into the durable per-replica log files (jobs/live/logstore.py), so they outlive the pods
and followers read them exactly as for local jobs.

One follower thread per pod streams `GET .../pods/<pod>/log?follow&timestamps`. Every line
carries the kubelet's RFC3339Nano timestamp, which is stripped before the line is stored and
kept in a cursor file beside the log: {offset, pods: {uid: {ts, n, done}}} where `n` counts the
lines already stored that carry exactly `ts`. A reconnect asks for `sinceTime` (whole seconds)
and skips what the cursor says is stored, so no line is lost or doubled across dropped streams
or a restart of the watcher; bytes written after the last cursor update (a crash between the
two writes) are cut back to the cursor's offset and fetched again, so they are never doubled.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from ...live import logstore, notify
from ...models import Replica
from .client import Api
from .manifests import CONTAINER
from .status import meta, replica_key

log = logging.getLogger(__name__)
Obj = dict[str, Any]
BACKOFF_CAP_SECONDS = 30.0
NOTICE_AFTER_FAILURES = 2
# The watcher waits this long in all for a job's ended pods' last lines, then looks again later;
# their replicas are held back at most LOG_GRACE_SECONDS after the pod ended (a node that does
# not answer must not keep a job from ending for good).
DRAIN_SECONDS = 0.5
LOG_GRACE_SECONDS = 30.0
_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _file_locks_guard:
        return _file_locks.setdefault(str(path), threading.Lock())


def parse_ts(text: str) -> tuple[datetime, int] | None:
    """(seconds, nanoseconds) of an RFC3339Nano stamp; Go trims trailing zeros, so string
    order is not time order."""
    try:
        head, _, frac = text.rstrip("Z").partition(".")
        secs = datetime.fromisoformat(head).replace(tzinfo=UTC)
        return secs, int((frac + "000000000")[:9]) if frac else 0
    except ValueError:
        return None


def cursor_path(replica: Replica) -> Path:
    return logstore.path(replica).with_suffix(".cursor.json")


class Cursor:
    """Where a replica's log stands; read and written under the replica file's lock."""

    def __init__(self, replica: Replica):
        self.replica = replica
        self.path = cursor_path(replica)
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            data = {}
        self.offset: int = data.get("offset", logstore.size(replica))
        self.pods: dict[str, dict[str, Any]] = data.get("pods", {})

    def repair(self) -> None:
        """Cut bytes that were appended but never recorded (a crash between the two writes)."""
        log_path = logstore.path(self.replica)
        if log_path.exists() and log_path.stat().st_size > self.offset:
            os.truncate(log_path, self.offset)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offset": self.offset, "pods": self.pods}))
        os.replace(tmp, self.path)


def container_started(pod: Obj) -> bool:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            state, last = cs.get("state") or {}, cs.get("lastState") or {}
            return bool(state.get("running") or state.get("terminated") or last.get("terminated"))
    return False


def container_done(pod: Obj) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") in ("Succeeded", "Failed")


class Follower(threading.Thread):
    """Streams one pod's log into its replica's file until the container is done."""

    def __init__(self, collector: LogCollector, pod: Obj, replica: Replica):
        md = meta(pod)
        super().__init__(name=f"k8s-log-{md.get('name')}", daemon=True)
        self.collector, self.replica = collector, replica
        self.uid, self.pod_name, self.namespace = md.get("uid", ""), md.get("name", ""), md.get("namespace", "")
        self.lock = _lock_for(logstore.path(replica))
        self.finished = threading.Event()
        self.response: urllib3.BaseHTTPResponse | None = None
        self.notice = logstore.notice(replica)

    def run(self) -> None:
        failures = 0
        try:
            while not self.collector.stop_event.is_set():
                try:
                    if self.follow_once():
                        return
                    failures = 0
                except StopFollowing:
                    return
                except ApiException as e:
                    if e.status == 404:  # the pod is gone: what was not read by then is lost
                        if self.notice:
                            self._set_notice(f"Pod {self.pod_name} was deleted before its log could be read "
                                             "again: the lines it wrote meanwhile are lost.")
                        return
                    failures += 1
                    self._cannot_read(f"the API server answered {e.status} {_api_message(e)}", failures)
                except Exception as e:  # noqa: BLE001 - reconnect on any stream failure
                    log.debug("log stream %s/%s dropped: %s", self.namespace, self.pod_name, e)
                    failures += 1
                    if self.response is None:  # not a stream cut short: the request itself failed
                        self._cannot_read(f"{type(e).__name__}: {e}", failures)
                self.collector.stop_event.wait(backoff(failures))
        finally:
            self.finished.set()
            self.collector.on_read(self.replica.job_id)

    def _cannot_read(self, why: str, failures: int) -> None:
        """Tell the job's viewers why its log stopped coming in, once the failure repeats (a
        single dropped request is retried at once and is nobody's concern)."""
        if failures < NOTICE_AFTER_FAILURES:
            return
        self._set_notice(f"The log of pod {self.pod_name} cannot be read now ({why}); lines written meanwhile are "
                         f"kept by the node and fetched when it answers. Retrying (attempt {failures}).")

    def _set_notice(self, text: str) -> None:
        if text == self.notice:
            return
        if text and not self.notice:
            log.warning("log of pod %s/%s cannot be read: %s", self.namespace, self.pod_name, text)
        self.notice = text
        with self.lock:
            logstore.set_notice(self.replica, text)
        notify.log_notice(self.replica.job_id, f"{self.replica.role}-{self.replica.index}", text)

    def _state(self) -> dict[str, Any]:
        with self.lock:
            cur = Cursor(self.replica)
            return dict(cur.pods.get(self.uid) or {"ts": "", "n": 0, "done": False})

    def follow_once(self) -> bool:
        """One log request; True when the container is done and everything is stored."""
        state = self._state()
        if state.get("done"):
            return True
        since = state["ts"].split(".")[0].rstrip("Z") + "Z" if state["ts"] else None
        # Only a stream opened after the container finished is known to end with its last line
        # (one cut short by a proxy or a restart looks the same as a normal end).
        before = self.collector.pod(self.uid)
        complete_when_ended = before is None or container_done(before)
        self.response = None
        resp = self.collector.open_log(self.namespace, self.pod_name, since)
        self.response = resp
        self._set_notice("")
        pos = Position(state["ts"], state["n"])
        buffer = b""
        try:
            for chunk in resp.stream(64 * 1024, decode_content=True):
                buffer += chunk
                lines, _, buffer = buffer.rpartition(b"\n")
                if lines:
                    self._store(pos.take(lines.split(b"\n")), pos)
            if buffer and complete_when_ended:  # a last line without a newline, complete
                self._store(pos.take([buffer]), pos)
            # Otherwise a partial line may be a cut stream's: the next request brings it whole.
        finally:
            resp.release_conn()
        if complete_when_ended:
            with self.lock:
                cur = Cursor(self.replica)
                cur.pods.setdefault(self.uid, {"ts": "", "n": 0})["done"] = True
                cur.save()
            return True
        pod = self.collector.pod(self.uid)
        if pod is None or container_done(pod):
            return self.follow_once()  # finished meanwhile: one more read takes the rest
        return False

    def _store(self, lines: list[bytes], pos: Position) -> None:
        if not lines:
            return
        with self.lock:
            if self.collector.stop_event.is_set():
                # Stopped (a new collector may follow this pod now): it resumes from the cursor.
                raise StopFollowing()
            cur = Cursor(self.replica)
            cur.repair()
            cur.offset = logstore.append(self.replica, b"".join(lines))
            cur.pods[self.uid] = {"ts": pos.stamp, "n": pos.count, "done": False}
            cur.save()


def backoff(failures: int) -> float:
    """Seconds before the next log request: capped exponential, jittered so that the followers
    of a node that went away do not all come back at once."""
    seconds: float = min(BACKOFF_CAP_SECONDS, 0.2 * 2 ** min(failures, 8)) * random.uniform(0.5, 1.0)
    return seconds


def _api_message(e: ApiException) -> str:
    """The reason and the Status message (for pods/log, the kubelet's error) of an API error."""
    try:
        message = json.loads(e.body or "{}").get("message") or ""
    except (ValueError, AttributeError):
        message = ""
    return f"{e.reason or ''}: {message}".strip(": ") if message else (e.reason or "")


class StopFollowing(Exception):
    pass


class Position:
    """The last stored timestamp, how many stored lines carry it, and how many of those a
    resumed stream (which starts at the whole second) will repeat and must be skipped."""

    def __init__(self, stamp: str, count: int):
        self.stamp, self.count = stamp, count
        self.last = parse_ts(stamp) if stamp else None
        self.skip = count if self.last else 0

    def take(self, raw_lines: list[bytes]) -> list[bytes]:
        """The lines to store (timestamps stripped, newline added) out of a stream's lines."""
        out: list[bytes] = []
        for raw in raw_lines:
            stamp, _, text = raw.partition(b" ")
            ts = parse_ts(stamp.decode("ascii", "replace"))
            if ts is None:  # an unstamped line (should not happen): keep it
                out.append(raw + b"\n")
                continue
            if self.last is not None and ts < self.last:
                continue
            if self.last is not None and ts == self.last:
                if self.skip:
                    self.skip -= 1
                    continue
                self.count += 1
            else:
                self.last, self.count, self.skip = ts, 1, 0
            self.stamp = stamp.decode("ascii")
            out.append(text + b"\n")
        return out


class LogCollector:
    """Starts a follower for every started container of our pods; one per pod at a time."""

    def __init__(self, api: Api, stop_event: threading.Event, on_read: Callable[[int], None]):
        self.api = api
        self.stop_event = stop_event
        self.on_read = on_read  # told a job's id when one of its followers is done
        self.followers: dict[str, Follower] = {}
        self.pods: dict[str, Obj] = {}
        self.ended: dict[str, float] = {}  # uid -> when we heard its pod ended (monotonic)
        self.lock = threading.Lock()

    def pod(self, uid: str) -> Obj | None:
        with self.lock:
            return self.pods.get(uid)

    def consider(self, kind: str, event: str, pod: Obj) -> None:
        """A ClusterState listener."""
        if kind != "Pod":
            return
        uid = meta(pod).get("uid", "")
        key = replica_key(pod)
        if not uid or key is None:
            return
        with self.lock:
            if event == "DELETED":
                self.pods.pop(uid, None)
                self.ended.pop(uid, None)
                return
            self.pods[uid] = pod
            if container_done(pod):
                self.ended.setdefault(uid, time.monotonic())
            current = self.followers.get(uid)
            if (current and current.is_alive()) or not container_started(pod):
                return
            replica = Replica(job_id=key[0], role=key[1], index=key[2])  # unsaved: its key is all a log needs
            follower = Follower(self, pod, replica)
            if current is not None and follower._state().get("done"):
                return
            self.followers[uid] = follower
        follower.start()

    def stop(self) -> None:
        from .informer import shutdown

        self.stop_event.set()
        with self.lock:
            followers = list(self.followers.values())
        for f in followers:
            shutdown(f.response)

    def drain(self, job_id: int, timeout: float = DRAIN_SECONDS) -> set[tuple[str, int]]:
        """Wait a little for the followers of a job's ended pods to store their last lines. The
        replicas (role, index) whose log is still being read: the lifecycle must not act on their
        end yet, since ending the job deletes its pods (the follower's end, through `on_read`,
        has the job looked at again). One is held back at most LOG_GRACE_SECONDS."""
        deadline = time.monotonic() + timeout
        with self.lock:
            reading = [(f, self.ended[f.uid]) for f in self.followers.values()
                       if f.replica.job_id == job_id and f.is_alive() and f.uid in self.ended]
        held = set()
        for f, ended in reading:
            if not f.finished.wait(max(0.0, deadline - time.monotonic())) and \
                    time.monotonic() - ended < LOG_GRACE_SECONDS:
                held.add((f.replica.role, f.replica.index))
        return held

    def forget(self, job_id: int) -> None:
        with self.lock:
            for uid in [u for u, f in self.followers.items() if f.replica.job_id == job_id and not f.is_alive()]:
                del self.followers[uid]

    def open_log(self, namespace: str, name: str, since: str | None) -> urllib3.BaseHTTPResponse:
        """GET the log stream with sinceTime, which the typed method does not take."""
        query: list[tuple[str, str]] = [("container", CONTAINER), ("follow", "true"), ("timestamps", "true")]
        if since:
            query.append(("sinceTime", since))
        request = self.api.client.param_serialize(
            "GET", "/api/v1/namespaces/{namespace}/pods/{name}/log",
            path_params={"namespace": namespace, "name": name}, query_params=query,
            header_params={"Accept": "*/*"}, auth_settings=["BearerToken"])
        # No read timeout: a quiet training program is not a dead stream (TCP keepalive is on).
        resp = self.api.client.call_api(*request, _request_timeout=(10, None))
        if not 200 <= resp.status <= 299:
            resp.read()  # type: ignore[no-untyped-call]  # kubernetes' RESTResponse is untyped
            raise ApiException.from_response(http_resp=resp, body=None, data=None)
        stream: urllib3.BaseHTTPResponse = resp.response
        return stream
