"""From Kubernetes objects to replica states, with the reason a person can act on. Pure.

Every way a pod can be stuck or die becomes an explicit reason: the scheduler's message for an
unschedulable pod, the image pull error, the crash loop, OOMKilled, a failed mount (which only
shows up as a Warning event, so the latest one for the pod is passed in).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...models import ReplicaState
from ..base import ReplicaStatus
from .manifests import COMPLETION_INDEX, CONTAINER, KUBEFLOW_INDEX, LABEL_INDEX, LABEL_JOB_ID, LABEL_ROLE

Obj = dict[str, Any]

# Waiting reasons that can clear by themselves (a registry hiccup, a Secret created late): the
# replica stays Pending with the reason shown, and fails only at the pending timeout.
PENDING_REASONS = {"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError",
                   "RunContainerError", "PreCreateHookError", "PostStartHookError"}
# Waiting reasons that never clear: fail at once.
FATAL_REASONS = {"InvalidImageName", "ErrImageNeverPull"}
# Warning events that explain a pod stuck in ContainerCreating.
MOUNT_WARNINGS = {"FailedMount", "FailedAttachVolume", "FailedCreatePodSandBox", "FailedMapVolume"}
# Kinds the roles' workloads report creation failures on (quota exceeded, admission denied).
_ORDINAL = re.compile(r"-(\d+)$")


@dataclass(frozen=True)
class Warning:
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
    raw = lbls.get(LABEL_INDEX) or ann.get(COMPLETION_INDEX) or lbls.get(COMPLETION_INDEX) or lbls.get(KUBEFLOW_INDEX) \
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


def pod_status(pod: Obj, role: str, *, warning: Warning | None = None) -> ReplicaStatus:
    """The replica state one pod shows, with its reason."""
    md, spec, st = meta(pod), pod.get("spec") or {}, pod.get("status") or {}
    phase = st.get("phase") or "Pending"
    main = _main(st.get("containerStatuses"))
    state, last = main.get("state") or {}, main.get("lastState") or {}
    node = spec.get("nodeName") or ""
    started = parse_time((state.get("running") or {}).get("startedAt")) or parse_time(st.get("startTime"))
    base: dict[str, Any] = {"pod": md.get("name", ""), "started": started}
    conditions = {c.get("type"): c for c in st.get("conditions") or []}

    if phase == "Succeeded":
        term = state.get("terminated") or {}
        return ReplicaStatus(ReplicaState.SUCCEEDED, 0, "Completed", "",
                             finished=parse_time(term.get("finishedAt")), **base)
    disrupted = (conditions.get("DisruptionTarget") or {}).get("status") == "True"
    if disrupted and role == "trainer":
        # The trainer Job replaces it under the same index (podFailurePolicy: Ignore).
        return ReplicaStatus(ReplicaState.RUNNING, None, "Disrupted",
                             (conditions["DisruptionTarget"].get("message") or "node disruption") + "; being replaced",
                             **base)
    deleting = parse_time(md.get("deletionTimestamp"))
    if phase == "Failed" and not (deleting and _ended_by_deletion(st, state.get("terminated"), deleting)):
        # Checked before the deletion mark: the cluster deletes the pods of a failed job, and a
        # pod that failed by itself keeps its own exit code and reason while it goes.
        term = state.get("terminated") or last.get("terminated")
        if term:
            return _finished(term, term.get("exitCode"), term.get("reason") or "Error", describe_exit(term), **base)
        init = _main(st.get("initContainerStatuses"))
        iterm = (init.get("state") or {}).get("terminated")
        if iterm:
            return _finished(iterm, iterm.get("exitCode"), "InitFailed",
                             f"copying the package into the pod failed: {describe_exit(iterm)}", **base)
        return ReplicaStatus(ReplicaState.FAILED, None, st.get("reason") or "Failed",
                             st.get("message") or "the pod failed", **base)
    if deleting:
        # Being deleted: by us (kill, job ended) or by the trainer Job after a sibling failed.
        term = state.get("terminated") or {}
        if not ("running" in state or term or last.get("terminated")):
            return ReplicaStatus(ReplicaState.TERMINATED, None, "NotStarted", "the job ended before it started",
                                 **base)
        return ReplicaStatus(ReplicaState.TERMINATED, term.get("exitCode"), "Terminated", "stopped by PaddleCloud",
                             finished=parse_time(term.get("finishedAt")), **base)
    if phase == "Unknown":
        return ReplicaStatus(ReplicaState.RUNNING, None, "NodeLost", f"node {node} stopped reporting this pod", **base)

    # Pending or Running.
    for init in st.get("initContainerStatuses") or []:
        iterm = (init.get("state") or {}).get("terminated") or (init.get("lastState") or {}).get("terminated")
        if iterm and iterm.get("exitCode"):
            return _finished(iterm, iterm["exitCode"], "InitFailed",
                             f"copying the package into the pod failed: {describe_exit(iterm)}", **base)
    waiting_all = [(c.get("state") or {}).get("waiting") or {} for c in
                   (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or [])]
    for waiting in waiting_all:
        reason = waiting.get("reason") or ""
        if reason in FATAL_REASONS:
            return ReplicaStatus(ReplicaState.FAILED, None, reason, waiting.get("message") or reason, **base)
    waiting = state.get("waiting") or {}
    restarts = main.get("restartCount") or 0
    if role == "pserver" and (state.get("terminated") or restarts):
        # Pservers never exit by themselves; one that did lost its parameters (as locally).
        term = state.get("terminated") or last.get("terminated") or {}
        reason = term.get("reason") or "Error"
        if waiting.get("reason") == "CrashLoopBackOff" and reason != "OOMKilled":
            reason = "CrashLoopBackOff"
        return _finished(term, term.get("exitCode"), reason, f"the pserver {describe_exit(term)}", **base)
    if waiting.get("reason") == "CrashLoopBackOff":
        term = last.get("terminated") or {}
        return _finished(term, term.get("exitCode"), "CrashLoopBackOff",
                         f"{describe_exit(term)}; restarted {restarts} times", **base)
    if state.get("running"):
        ready = "" if main.get("ready") or role != "pserver" else ", not ready yet"
        return ReplicaStatus(ReplicaState.RUNNING, None, "Running", f"on node {node}{ready}" if node else "", **base)

    sched = conditions.get("PodScheduled") or {}
    if sched.get("status") == "False":
        return ReplicaStatus(ReplicaState.PENDING, None, sched.get("reason") or "Unschedulable",
                             sched.get("message") or "no node can run this pod", **base)
    for waiting in waiting_all:
        reason = waiting.get("reason") or ""
        if reason in PENDING_REASONS:
            return ReplicaStatus(ReplicaState.PENDING, None, reason, waiting.get("message") or reason, **base)
    if warning and warning.reason in MOUNT_WARNINGS:
        return ReplicaStatus(ReplicaState.PENDING, None, warning.reason, warning.message, **base)
    reason = waiting.get("reason") or ("ContainerCreating" if node else "Scheduling")
    return ReplicaStatus(ReplicaState.PENDING, None, reason, f"on node {node}" if node else "", **base)


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
