"""The shapes the old client parses: lists as the Kubernetes Python client's `to_dict()` gives
them (snake_case keys, None where Kubernetes has no value), built from our jobs and replicas."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from accounts.models import Registry
from jobs.models import Job, JobState, Replica, ReplicaState
from pfs.services import Entry
from quotas.models import Quota
from quotas.services import Resources

# What the old client reads: JSON objects shaped as the Kubernetes client's to_dict() gives them.
Json = dict[str, Any]

_PHASE: dict[str, str] = {ReplicaState.PENDING: "Pending", ReplicaState.RUNNING: "Running",
          ReplicaState.SUCCEEDED: "Succeeded", ReplicaState.FAILED: "Failed"}


def timestamp(value: datetime | None) -> str | None:
    """RFC 3339 in UTC, as Kubernetes prints times (`2017-05-24T07:52:45Z`)."""
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def _count(replicas: list[Replica], *states: str) -> int | None:
    """Kubernetes leaves a Job's counters unset (None, `<nil>` in the client) rather than 0."""
    return sum(r.state in states for r in replicas) or None


def job_list(jobs: list[Job]) -> Json:
    """A batch/v1 JobList of each job's trainers (`<job>-trainer`), with `terminating`: jobs
    killed whose workers are still stopping."""
    items: list[Json] = []
    terminating: list[str] = []
    for job in jobs:
        trainers = [r for r in job.replicas.all() if r.role == Replica.Role.TRAINER]
        items.append({
            "api_version": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{job.name}-trainer", "creation_timestamp": timestamp(job.created),
                         "labels": {"paddle-job": job.name}},
            "spec": {"parallelism": job.trainers, "completions": job.trainers},
            "status": {"succeeded": _count(trainers, ReplicaState.SUCCEEDED),
                       "failed": _count(trainers, ReplicaState.FAILED),
                       "active": _count(trainers, ReplicaState.PENDING, ReplicaState.RUNNING),
                       "start_time": timestamp(job.started), "completion_time": timestamp(job.finished),
                       "conditions": _conditions(job)},
        })
        if job.state == JobState.KILLED and any(r.state == ReplicaState.RUNNING for r in job.replicas.all()):
            terminating.append(job.name)
    return {"api_version": "batch/v1", "kind": "JobList", "items": items, "metadata": {},
            "terminating": terminating}


def _conditions(job: Job) -> list[Json] | None:
    """A suspended job reads as Kubernetes shows a suspended batch/v1 Job, a queued one as Kueue
    shows a waiting Job (with its place and reason): a Suspended condition."""
    if job.state == JobState.SUSPENDED:
        reason, message = "JobSuspended", job.message or None
    elif job.state == JobState.QUEUED:
        place = f"position {job.queue_position} in the queue" if job.queue_position else "in the queue"
        reason, message = job.reason or "Queued", f"{place}: {job.message}" if job.message else place
    else:
        return None
    return [{"type": "Suspended", "status": "True", "reason": reason, "message": message,
             "last_probe_time": None, "last_transition_time": None}]


def pserver_list(jobs: list[Job]) -> Json:
    """An apps/v1 ReplicaSetList of each parameter-server job's pservers (`<job>-pserver`)."""
    items: list[Json] = []
    for job in jobs:
        if job.mode != Job.Mode.PS or not job.pservers:
            continue
        ready = sum(r.state == ReplicaState.RUNNING for r in job.replicas.all() if r.role == Replica.Role.PSERVER)
        items.append({
            "api_version": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{job.name}-pserver", "creation_timestamp": timestamp(job.created),
                         "labels": {"paddle-job-pserver": job.name}},
            "spec": {"replicas": job.pservers},
            "status": {"replicas": job.pservers, "ready_replicas": ready or None,
                       "available_replicas": ready or None},
        })
    return {"api_version": "apps/v1", "kind": "ReplicaSetList", "items": items, "metadata": {}}


def _container_state(r: Replica, job: Job) -> Json:
    none = {"running": None, "terminated": None, "waiting": None}
    if r.state == ReplicaState.PENDING:
        # A worker waits on its job (Queued, Building, Starting) or, in a running job, to start
        # again; Kubernetes calls the latter ContainerCreating.
        why = r.reason or (job.state if job.state != JobState.RUNNING else "ContainerCreating")
        return {**none, "waiting": {"reason": why, "message": r.message or job.message or None}}
    if r.state == ReplicaState.RUNNING:
        return {**none, "running": {"started_at": timestamp(r.started)}}
    return {**none, "terminated": {"exit_code": r.exit_code if r.exit_code is not None else -1,
                                   "reason": r.reason or r.state, "message": r.message or None,
                                   "started_at": timestamp(r.started), "finished_at": timestamp(r.finished)}}


def pod_list(job: Job | None, pod_name: Callable[[Replica, Job], str]) -> Json:
    """A v1 PodList of the job's workers (none for no job). The client reads
    `container_statuses[0]` of every pod, so each has one: a worker that has not started yet
    (its job queued, building or starting) is waiting, with the reason."""
    items: list[Json] = []
    if job is not None:
        items.extend(_pod(r, job, pod_name) for r in job.replicas.all())
    return {"api_version": "v1", "kind": "PodList", "items": items, "metadata": {}}


def _pod(r: Replica, job: Job, pod_name: Callable[[Replica, Job], str]) -> Json:
    phase = _PHASE.get(r.state) or ("Succeeded" if r.exit_code == 0 else "Failed")
    return {
        "api_version": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(r, job), "labels": {"paddle-job": job.name, "paddle-role": r.role}},
        "status": {"phase": phase, "start_time": timestamp(r.started), "host_ip": r.host or None,
                   "pod_ip": r.host or None, "reason": r.reason or None, "message": r.message or None,
                   "container_statuses": [{
                       "name": r.role, "ready": r.state == ReplicaState.RUNNING,
                       "restart_count": r.restarts, "image": job.image or None,
                       "state": _container_state(r, job)}]},
    }


def cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(n: int) -> str:
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def quota_list(quota: Quota, used: Resources, running_jobs: int, running_pods: int) -> Json:
    """A v1 ResourceQuotaList mirroring the user's quota (we bound jobs, not pods: `pods` is
    unlimited, and the job count is its own key)."""
    hard = {"requests.cpu": cpu_quantity(quota.cpu_millicores), "requests.memory": memory_quantity(quota.memory_bytes),
            "alpha.kubernetes.io/nvidia-gpu": str(quota.gpus), "pods": "unlimited",
            "paddlecloud/running-jobs": str(quota.max_running_jobs)}
    now = {"requests.cpu": cpu_quantity(used.cpu_millicores), "requests.memory": memory_quantity(used.memory_bytes),
           "alpha.kubernetes.io/nvidia-gpu": str(used.gpus), "pods": str(running_pods),
           "paddlecloud/running-jobs": str(running_jobs)}
    return {"api_version": "v1", "kind": "ResourceQuotaList", "metadata": {},
            "items": [{"metadata": {"name": "quota"}, "spec": {"hard": hard}, "status": {"hard": hard, "used": now}}]}


def registry_list(registries: list[Registry]) -> Json:
    """Image pull secrets as a v1 SecretList: names only, never the credentials."""
    return {"items": [{"metadata": {"name": r.name, "creation_timestamp": timestamp(r.created)},
                       "type": "kubernetes.io/dockerconfigjson"} for r in registries]}


def pfs_entry(e: Entry) -> Json:
    return {"Path": e.path, "ModTime": int(e.mtime.timestamp() * 1_000_000_000), "Size": e.size, "IsDir": e.is_dir}
