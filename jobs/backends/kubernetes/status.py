"""From Kubernetes objects to replica states, with the reason a person can act on. Pure.

Every way a pod can be stuck or die becomes an explicit reason: the scheduler's message for an
unschedulable pod, the image pull error, the crash loop, OOMKilled, a failed mount (which only
shows up as a Warning event, so the latest one for the pod is passed in). What the lifecycle
decides from them (a pending timeout, the job's reason) is not decided here: a status only says
what is so (jobs/lifecycle/waiting.py).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...models import ReplicaState
from ..base import ReplicaStatus
from .manifests import COMPLETION_INDEX, CONTAINER, LABEL_INDEX, LABEL_JOB_ID, LABEL_ROLE

Obj = dict[str, Any]

# Waiting reasons that can clear by themselves (a registry hiccup, a Secret created late): the
# replica stays Pending with the reason shown, and fails only at the pending timeout.
PENDING_REASONS = {"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError",
                   "RunContainerError", "PreCreateHookError", "PostStartHookError"}
# Waiting reasons that never clear: fail at once.
FATAL_REASONS = {"InvalidImageName", "ErrImageNeverPull"}
# Warning events that explain a pod stuck in ContainerCreating.
MOUNT_WARNINGS = {"FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox", "FailedMapVolume"}
GATED = "SchedulingGated"
DISK_LIMIT = "DiskLimit"  # the local backend's reason for the same (jobs/backends/local/keepers.py)
# How the kubelet's eviction manager words an eviction for a pod's own ephemeral-storage limits
# (localStorageEviction, pkg/kubelet/eviction/eviction_manager.go; the formats in helpers.go): with
# status.reason Evicted, and without the DisruptionTarget condition a node-pressure eviction has.
OWN_DISK_EVICTIONS = ("Pod ephemeral local storage usage exceeds the total limit of containers",
                      "exceeded its local ephemeral storage limit", "Usage of EmptyDir volume")
_ORDINAL = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class Warning:  # noqa: A001 - Kubernetes' event type, named as Kubernetes names it
    reason: str
    message: str


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def replica_key(pod: Obj) -> tuple[int, str, int] | None:
    """(job id, role, index) of one of our pods, or None for anything else."""
    md = meta(pod)
    lbls, ann = md.get("labels") or {}, md.get("annotations") or {}
    try:
        job_id = int(lbls[LABEL_JOB_ID])
    except (KeyError, ValueError):
        return None
    role = lbls.get(LABEL_ROLE)
    if role not in ("pserver", "trainer"):
        return None
    raw = lbls.get(LABEL_INDEX) or ann.get(COMPLETION_INDEX) or lbls.get(COMPLETION_INDEX) \
        or lbls.get("apps.kubernetes.io/pod-index")
    if raw is None:  # a StatefulSet pod before 1.28: its name ends in the ordinal
        m = _ORDINAL.search(md.get("name", ""))
        if m is None:
            return None
        raw = m.group(1)
    try:
        return job_id, role, int(raw)
    except (TypeError, ValueError):
        return None


def _main(statuses: list[Obj] | None) -> Obj:
    for cs in statuses or []:
        if cs.get("name") == CONTAINER:
            return cs
    return (statuses or [{}])[0] if statuses else {}


def disk_eviction(status: Obj) -> str:
    """The kubelet's message if it evicted the pod for writing more than its disk limit, else ""."""
    message = (status.get("message") or "").strip()
    return message if status.get("reason") == "Evicted" and any(m in message for m in OWN_DISK_EVICTIONS) else ""


def describe_exit(term: Obj) -> str:
    code = term.get("exitCode")
    reason = term.get("reason") or ""
    if reason == "OOMKilled":
        return "was killed for exceeding its memory limit (OOMKilled)"
    if isinstance(code, int) and code > 128:
        try:
            return f"killed by signal {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    text = f"exited with code {code}"
    return f"{text}: {term['message'].strip()}" if term.get("message") else text


def _ended_by_deletion(st: Obj, term: Obj | None, deleting: datetime) -> bool:
    """Whether a failed pod marked for deletion ended because of it (the kubelet stops the
    container, which exits on SIGTERM or SIGKILL, or never starts it) rather than before it."""
    if term is None:
        init_failed = any(((c.get("state") or {}).get("terminated") or {}).get("exitCode")
                          for c in st.get("initContainerStatuses") or [])
        return not init_failed and not st.get("reason")  # not evicted, no init failure: never ran
    finished = parse_time(term.get("finishedAt"))
    if finished is None or finished != deleting:
        return finished is not None and finished > deleting
    # The same second (the API's timestamps have no finer grain): the stop signals decide.
    return term.get("exitCode") in (128 + signal.SIGTERM, 128 + signal.SIGKILL) and term.get("reason") != "OOMKilled"


def _finished(term: Obj, code: int | None, reason: str, message: str, **base: Any) -> ReplicaStatus:
    finished = parse_time(term.get("finishedAt"))
    return ReplicaStatus(ReplicaState.FAILED, code, reason, message, finished=finished, **base)


@dataclass(frozen=True)
class _Pod:
    """The parts of a pod that decide its replica's state."""

    role: str
    phase: str
    status: Obj
    state: Obj  # the main container's state and last state
    last: Obj
    restarts: int
    node: str
    conditions: dict[str, Obj]
    deleting: datetime | None
    base: dict[str, Any]  # what every status of this pod says

    @classmethod
    def of(cls, pod: Obj, role: str) -> _Pod:
        md, spec, st = meta(pod), pod.get("spec") or {}, pod.get("status") or {}
        main = _main(st.get("containerStatuses"))
        state = main.get("state") or {}
        started = parse_time((state.get("running") or {}).get("startedAt")) or parse_time(st.get("startTime"))
        return cls(role, st.get("phase") or "Pending", st, state, main.get("lastState") or {},
                   main.get("restartCount") or 0, spec.get("nodeName") or "",
                   {c.get("type"): c for c in st.get("conditions") or []}, parse_time(md.get("deletionTimestamp")),
                   {"pod": md.get("name", ""), "started": started})

    def waiting_reasons(self) -> list[Obj]:
        return [(c.get("state") or {}).get("waiting") or {} for c in
                (self.status.get("initContainerStatuses") or []) + (self.status.get("containerStatuses") or [])]


def pod_status(pod: Obj, role: str, *, warning: Warning | None = None) -> ReplicaStatus:
    """The replica state one pod shows, with its reason; a Pending one says since when it waits
    (the pod's creation) and whether it is blocked (a reason the user can act on) or queued."""
    p = _Pod.of(pod, role)
    for step in (_succeeded, _over_disk_limit, _disrupted, _failed, _deleted, _lost, _init_failed, _crashed, _running):
        status = step(p)
        if status is not None:
            return status
    return _pending(p, warning, created=parse_time(meta(pod).get("creationTimestamp")))


def _succeeded(p: _Pod) -> ReplicaStatus | None:
    if p.phase != "Succeeded":
        return None
    term = p.state.get("terminated") or {}
    return ReplicaStatus(ReplicaState.SUCCEEDED, 0, "Completed", "", finished=parse_time(term.get("finishedAt")),
                         **p.base)


def _over_disk_limit(p: _Pod) -> ReplicaStatus | None:
    """Evicted for its own writing, not disrupted: whatever else it says, a retry would only do the
    same again (the lifecycle fails the job, as for a local replica over its disk_limit)."""
    why = disk_eviction(p.status)
    if not why:
        return None
    term = p.state.get("terminated") or {}
    return _finished(term, term.get("exitCode"), DISK_LIMIT,
                     f"evicted for writing more to its node's disk (working copy, $HOME, /tmp, logs) than the "
                     f"datacenter's disk_limit; the kubelet said: {why}", **p.base)


def _disrupted(p: _Pod) -> ReplicaStatus | None:
    cond = p.conditions.get("DisruptionTarget") or {}
    if cond.get("status") != "True" or p.role != "trainer":
        return None
    # The trainer Job replaces it under the same index (podFailurePolicy: Ignore).
    return ReplicaStatus(ReplicaState.RUNNING, None, "Disrupted",
                         (cond.get("message") or "node disruption") + "; being replaced", **p.base)


def _failed(p: _Pod) -> ReplicaStatus | None:
    """Checked before the deletion mark: the cluster deletes the pods of a failed job, and a pod
    that failed by itself keeps its own exit code and reason while it goes."""
    if p.phase != "Failed" or (p.deleting and _ended_by_deletion(p.status, p.state.get("terminated"), p.deleting)):
        return None
    term = p.state.get("terminated") or p.last.get("terminated")
    if term:
        return _finished(term, term.get("exitCode"), term.get("reason") or "Error", describe_exit(term), **p.base)
    init = _main(p.status.get("initContainerStatuses"))
    iterm = (init.get("state") or {}).get("terminated")
    if iterm:
        return _finished(iterm, iterm.get("exitCode"), "InitFailed",
                         f"copying the package into the pod failed: {describe_exit(iterm)}", **p.base)
    return ReplicaStatus(ReplicaState.FAILED, None, p.status.get("reason") or "Failed",
                         p.status.get("message") or "the pod failed", **p.base)


def _deleted(p: _Pod) -> ReplicaStatus | None:
    """Being deleted: by us (kill, job ended) or by the trainer Job after a sibling failed."""
    if not p.deleting:
        return None
    term = p.state.get("terminated") or {}
    if not ("running" in p.state or term or p.last.get("terminated")):
        return ReplicaStatus(ReplicaState.TERMINATED, None, "NotStarted", "the job ended before it started", **p.base)
    return ReplicaStatus(ReplicaState.TERMINATED, term.get("exitCode"), "Terminated", "stopped by PaddleCloud",
                         finished=parse_time(term.get("finishedAt")), **p.base)


def _lost(p: _Pod) -> ReplicaStatus | None:
    if p.phase != "Unknown":
        return None
    return ReplicaStatus(ReplicaState.RUNNING, None, "NodeLost", f"node {p.node} stopped reporting this pod", **p.base)


def _init_failed(p: _Pod) -> ReplicaStatus | None:
    """An init container that failed (Pending or Running), or an image that can never be used."""
    for init in p.status.get("initContainerStatuses") or []:
        iterm = (init.get("state") or {}).get("terminated") or (init.get("lastState") or {}).get("terminated")
        if iterm and iterm.get("exitCode"):
            return _finished(iterm, iterm["exitCode"], "InitFailed",
                             f"copying the package into the pod failed: {describe_exit(iterm)}", **p.base)
    fatal = next((w for w in p.waiting_reasons() if w.get("reason") in FATAL_REASONS), None)
    if fatal:
        return ReplicaStatus(ReplicaState.FAILED, None, fatal["reason"], fatal.get("message") or fatal["reason"],
                             **p.base)
    return None


def _crashed(p: _Pod) -> ReplicaStatus | None:
    waiting = p.state.get("waiting") or {}
    if p.role == "pserver" and (p.state.get("terminated") or p.restarts):
        # Pservers never exit by themselves; one that did lost its parameters (as locally).
        term = p.state.get("terminated") or p.last.get("terminated") or {}
        reason = term.get("reason") or "Error"
        if waiting.get("reason") == "CrashLoopBackOff" and reason != "OOMKilled":
            reason = "CrashLoopBackOff"
        return _finished(term, term.get("exitCode"), reason, f"the pserver {describe_exit(term)}",
                         crash_restarts=p.restarts, **p.base)
    if waiting.get("reason") == "CrashLoopBackOff":
        term = p.last.get("terminated") or {}
        return _finished(term, term.get("exitCode"), "CrashLoopBackOff",
                         f"{describe_exit(term)}; restarted {p.restarts} times", crash_restarts=p.restarts, **p.base)
    return None


def _running(p: _Pod) -> ReplicaStatus | None:
    if not p.state.get("running"):
        return None
    main = _main(p.status.get("containerStatuses"))
    ready = "" if main.get("ready") or p.role != "pserver" else ", not ready yet"
    return ReplicaStatus(ReplicaState.RUNNING, None, "Running", f"on node {p.node}{ready}" if p.node else "",
                         **p.base)


def _pending(p: _Pod, warning: Warning | None, created: datetime | None) -> ReplicaStatus:
    base = {**p.base, "pending_since": created}
    sched = p.conditions.get("PodScheduled") or {}
    if sched.get("status") == "False":
        reason = sched.get("reason") or "Unschedulable"
        # SchedulingGated: a scheduling gate holds it (Kueue's, until it admits the workload).
        return ReplicaStatus(ReplicaState.PENDING, None, reason, sched.get("message") or "no node can run this pod",
                             blocked=reason != GATED, queued=reason == GATED, **base)
    for waiting in p.waiting_reasons():
        reason = waiting.get("reason") or ""
        if reason in PENDING_REASONS:
            return ReplicaStatus(ReplicaState.PENDING, None, reason, waiting.get("message") or reason, blocked=True,
                                 **base)
    if warning and warning.reason in MOUNT_WARNINGS:
        return ReplicaStatus(ReplicaState.PENDING, None, warning.reason, warning.message, blocked=True, **base)
    reason = (p.state.get("waiting") or {}).get("reason") or ("ContainerCreating" if p.node else "Scheduling")
    return ReplicaStatus(ReplicaState.PENDING, None, reason, f"on node {p.node}" if p.node else "", **base)


def workload_failure(obj: Obj | None) -> tuple[str, str] | None:
    """The Failed condition of a batch Job (BackoffLimitExceeded, PodFailurePolicy, ...)."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and c.get("status") == "True":
            return c.get("reason") or "JobFailed", c.get("message") or "the trainer Job failed"
    return None


def workload_finished(obj: Obj) -> bool:
    """A Job that is Complete or Failed makes no more pods (a StatefulSet has no such condition)."""
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def ready_replicas(statefulset: Obj | None) -> int:
    return int(((statefulset or {}).get("status") or {}).get("readyReplicas") or 0)
