"""The workloads of a job attempt, as plain dicts (pure, like manifests.py whose pieces they are
built from): the pserver StatefulSet, the trainer Indexed Job with the job's restart policy, and
the JobSet that holds both. Which of them a job is made of is its layout's choice (layouts/);
a gang scheduler's marks are added by its add-on (gang.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import spec as job_spec
from .config import K8sSettings
from .manifests import (
    CONTAINER,
    LABEL_ATTEMPT,
    LABEL_JOB_ID,
    LABEL_ROLE,
    Hosts,
    Obj,
    jobset_name,
    labels,
    object_meta,
    pod_spec,
    pserver_name,
    replica_env,
    trainer_name,
)

if TYPE_CHECKING:
    from ...models import Job

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"


@dataclass(frozen=True)
class PodOptions:
    """What every pod of an attempt is made with, besides the job and the settings."""

    image: str
    runtime_ready: bool = False
    pull_secrets: tuple[str, ...] = ()
    grace_seconds: int = 30


def _template(job: Job, role: str, attempt: int, spec: Obj) -> Obj:
    return {"metadata": {"labels": labels(job, role, attempt=attempt)}, "spec": spec}


def _pod(job: Job, settings: K8sSettings, role: str, hosts: Hosts, opts: PodOptions, restart_policy: str) -> Obj:
    env = replica_env(job, settings, role, hosts, runtime_ready=opts.runtime_ready)
    port = settings.pserver_port if role == "pserver" else settings.trainer_port
    return pod_spec(job, settings, role, image=opts.image, env=env, port=port, restart_policy=restart_policy,
                    pull_secrets=list(opts.pull_secrets), grace_seconds=opts.grace_seconds)


def pserver_statefulset(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, hosts: Hosts, opts: PodOptions,
                        attempt: int = 0) -> Obj:
    spec = _pod(job, settings, "pserver", hosts, opts, "Always")
    selector = {LABEL_JOB_ID: str(job.pk), LABEL_ROLE: "pserver", LABEL_ATTEMPT: str(attempt)}
    name = pserver_name(job, attempt)
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": object_meta(name, ns, labels(job, "pserver", attempt=attempt), owner),
            "spec": {"serviceName": name, "replicas": job.pservers,
                     "podManagementPolicy": "Parallel",  # pservers need no order among themselves
                     "selector": {"matchLabels": selector},
                     "template": _template(job, "pserver", attempt, spec)}}


def max_restarts(job: Job) -> int:
    return job.max_restarts if job.max_restarts is not None else job.datacenter.default_max_restarts


def trainer_failure_policy(job: Job) -> tuple[int, Obj]:
    """(backoffLimitPerIndex, podFailurePolicy) of the trainer Job: in replica mode a failed index
    is retried by the Job controller up to max_restarts times (same index, same name); in gang
    mode never (the lifecycle restarts the whole job). An exit code the user marked permanent
    fails the index at once; a node drain or preemption is not the program's failure."""
    # DisruptionTarget: a drain, a preemption, a node-pressure eviction. An eviction for the pod's own
    # disk_limit has none (the kubelet's localStorageEviction): it counts, and fails the job (observe.py).
    rules: list[Obj] = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    codes = sorted(job_spec.exit_codes(job.permanent_exit_codes or ""))
    if codes:
        rules.append({"action": "FailIndex",
                      "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": codes}})
    limit = max_restarts(job) if job.restart_mode == "replica" else 0
    return limit, {"rules": rules}


def trainer_spec(job: Job, settings: K8sSettings, subdomain: str, hosts: Hosts, opts: PodOptions,
                 attempt: int) -> Obj:
    """The trainer Indexed Job's spec: its own Job, or the JobSet's `trainer` replicated job."""
    spec = _pod(job, settings, "trainer", hosts, opts, "Never")
    spec["subdomain"] = subdomain  # with the hostname <job name>-<i>: a stable DNS name
    per_index, policy = trainer_failure_policy(job)
    return {"completionMode": "Indexed", "completions": job.trainers, "parallelism": job.trainers,
            # Kubernetes 1.29+ (beta, on by default; GA in 1.33). The Job fails once an index has failed for good
            # (maxFailedIndexes 0): a trainer that cannot go on fails the job, as locally.
            "backoffLimitPerIndex": per_index, "maxFailedIndexes": 0, "podFailurePolicy": policy,
            "template": _template(job, "trainer", attempt, spec)}


def trainer_job(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, hosts: Hosts, opts: PodOptions,
                attempt: int = 0) -> Obj:
    name = trainer_name(job, attempt)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": object_meta(name, ns, labels(job, "trainer", attempt=attempt), owner),
            "spec": trainer_spec(job, settings, name, hosts, opts, attempt)}


def jobset(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, hosts: Hosts, opts: PodOptions,
           attempt: int = 0) -> Obj:
    """One JobSet (jobset.x-k8s.io/v1alpha2, JobSet 0.8+) for the whole attempt: the pservers'
    Indexed Job, then, once every pserver is ready (`dependsOn`, seed 001's order), the
    trainers'. It succeeds when the trainers do (the JobSet controller then deletes the
    pservers' Job) and fails when a Job fails; never restarted by its controller (maxRestarts 0):
    a gang restart is the lifecycle's, with a new attempt's JobSet."""
    name = jobset_name(job, attempt)
    replicated = []
    if job.pservers:
        # A Job's pods cannot restart Always: Never, and no retry (backoffLimit 0), since a pserver
        # that exited lost its parameters; the JobSet fails with its Job and the lifecycle decides.
        ps_spec = _pod(job, settings, "pserver", hosts, opts, "Never")
        ps_spec["subdomain"] = name
        replicated.append({"name": "pserver", "replicas": 1, "template": {
            "metadata": {"labels": labels(job, "pserver", attempt=attempt)},
            "spec": {"completionMode": "Indexed", "completions": job.pservers, "parallelism": job.pservers,
                     "backoffLimit": 0, "template": _template(job, "pserver", attempt, ps_spec)}}})
    trainers: Obj = {"name": "trainer", "replicas": 1, "template": {
        "metadata": {"labels": labels(job, "trainer", attempt=attempt)},
        "spec": trainer_spec(job, settings, name, hosts, opts, attempt)}}
    if job.pservers and job.mode == "ps":
        trainers["dependsOn"] = [{"name": "pserver", "status": "Ready"}]
    replicated.append(trainers)
    return {"apiVersion": JOBSET_API_VERSION, "kind": "JobSet",
            "metadata": object_meta(name, ns, labels(job, attempt=attempt), owner),
            "spec": {"replicatedJobs": replicated,
                     "successPolicy": {"operator": "All", "targetReplicatedJobs": ["trainer"]},
                     "failurePolicy": {"maxRestarts": 0},
                     # The JobSet controller makes the headless Service <name> for these host names.
                     "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True}}}


def pod_templates(workload: Obj) -> Iterator[Obj]:
    """Every pod template in a StatefulSet, a Job or a JobSet (for the gang add-ons' marks)."""
    spec = workload.get("spec") or {}
    if workload.get("kind") == "JobSet":
        for rj in spec.get("replicatedJobs") or []:
            yield rj["template"]["spec"]["template"]
    elif "template" in spec:
        yield spec["template"]
