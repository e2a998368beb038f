"""The workloads of a job attempt, as plain dicts (pure, like manifests.py whose pieces they are
built from): the pserver StatefulSet, the trainer Indexed Job with the job's restart policy, the
Volcano PodGroup of a gang-scheduled job, the JobSet of a pserver job under Kueue, and the
optional Kubeflow PaddleJob."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import spec as job_spec
from . import gang
from .config import K8sSettings
from .manifests import (
    CONTAINER,
    LABEL_ATTEMPT,
    LABEL_JOB_ID,
    LABEL_ROLE,
    Obj,
    jobset_name,
    labels,
    object_meta,
    paddle_job_name,
    pod_spec,
    podgroup_name,
    pserver_name,
    replica_env,
    trainer_name,
)

if TYPE_CHECKING:
    from ...models import Job


def _template(job: Job, settings: K8sSettings, role: str, attempt: int, spec: Obj) -> Obj:
    annotations: dict[str, str] = {}
    gang.pod_template(settings, podgroup_name(job, attempt), annotations, spec)
    md: Obj = {"labels": labels(job, role, attempt=attempt)}
    if annotations:
        md["annotations"] = annotations
    return {"metadata": md, "spec": spec}


def _workload_meta(job: Job, settings: K8sSettings, name: str, ns: str, role: str, attempt: int,
                   owner: Obj | None) -> Obj:
    return object_meta(name, ns, {**labels(job, role, attempt=attempt), **gang.workload_labels(settings)}, owner)


def pserver_statefulset(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, *, image: str, runtime_ready: bool,
                        pull_secrets: list[str], grace_seconds: int, attempt: int = 0) -> Obj:
    env = replica_env(job, settings, ns, "pserver", runtime_ready=runtime_ready, attempt=attempt)
    spec = pod_spec(job, settings, ns, "pserver", image=image, env=env, port=settings.pserver_port,
                    restart_policy="Always", pull_secrets=pull_secrets, grace_seconds=grace_seconds)
    selector = {LABEL_JOB_ID: str(job.pk), LABEL_ROLE: "pserver", LABEL_ATTEMPT: str(attempt)}
    name = pserver_name(job, attempt)
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": _workload_meta(job, settings, name, ns, "pserver", attempt, owner),
            "spec": {"serviceName": name, "replicas": job.pservers,
                     "podManagementPolicy": "Parallel",  # pservers need no order among themselves
                     "selector": {"matchLabels": selector},
                     "template": _template(job, settings, "pserver", attempt, spec)}}


def max_restarts(job: Job) -> int:
    return job.max_restarts if job.max_restarts is not None else job.datacenter.default_max_restarts


def trainer_failure_policy(job: Job) -> tuple[int, Obj]:
    """(backoffLimitPerIndex, podFailurePolicy) of the trainer Job: in replica mode a failed index
    is retried by the Job controller up to max_restarts times (same index, same name); in gang
    mode never (the lifecycle restarts the whole job). An exit code the user marked permanent
    fails the index at once; a node drain or preemption is not the program's failure."""
    rules: list[Obj] = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    codes = sorted(job_spec.exit_codes(job.permanent_exit_codes or ""))
    if codes:
        rules.append({"action": "FailIndex",
                      "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": codes}})
    limit = max_restarts(job) if job.restart_mode == "replica" else 0
    return limit, {"rules": rules}


def _trainer_spec(job: Job, settings: K8sSettings, ns: str, subdomain: str, *, image: str,
                  runtime_ready: bool, pull_secrets: list[str], grace_seconds: int, attempt: int) -> Obj:
    """The trainer Indexed Job's spec: its own Job, or the JobSet's `trainer` replicated job."""
    env = replica_env(job, settings, ns, "trainer", runtime_ready=runtime_ready, attempt=attempt)
    spec = pod_spec(job, settings, ns, "trainer", image=image, env=env, port=settings.trainer_port,
                    restart_policy="Never", pull_secrets=pull_secrets, grace_seconds=grace_seconds)
    spec["subdomain"] = subdomain  # with the hostname <job name>-<i>: a stable DNS name
    per_index, policy = trainer_failure_policy(job)
    return {"completionMode": "Indexed", "completions": job.trainers, "parallelism": job.trainers,
            # Kubernetes 1.29+ (beta, on by default; GA in 1.33). The Job fails once an index has failed for good
            # (maxFailedIndexes 0): a trainer that cannot go on fails the job, as locally.
            "backoffLimitPerIndex": per_index, "maxFailedIndexes": 0, "podFailurePolicy": policy,
            "template": _template(job, settings, "trainer", attempt, spec)}


def trainer_job(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, *, image: str, runtime_ready: bool,
                pull_secrets: list[str], grace_seconds: int, attempt: int = 0) -> Obj:
    name = trainer_name(job, attempt)
    body = _trainer_spec(job, settings, ns, name, image=image, runtime_ready=runtime_ready,
                         pull_secrets=pull_secrets, grace_seconds=grace_seconds, attempt=attempt)
    if settings.gang_scheduler == gang.KUEUE:
        body["suspend"] = True  # Kueue unsuspends it once admitted
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _workload_meta(job, settings, name, ns, "trainer", attempt, owner), "spec": body}


def jobset(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, *, image: str, runtime_ready: bool,
           pull_secrets: list[str], grace_seconds: int, attempt: int = 0) -> Obj:
    """A pserver job under Kueue as one JobSet (jobset.x-k8s.io/v1alpha2), which Kueue admits as
    one Workload: pservers and trainers start together or not at all. Created suspended (Kueue
    unsuspends it once admitted). It succeeds when the trainers do (the JobSet controller then
    deletes the pservers' Job) and fails when a Job fails; never restarted by its controller
    (maxRestarts 0): a gang restart is the lifecycle's, with a new attempt's JobSet."""
    name = jobset_name(job, attempt)
    env = replica_env(job, settings, ns, "pserver", runtime_ready=runtime_ready, attempt=attempt)
    # A Job's pods cannot restart Always: Never, and no retry (backoffLimit 0), since a pserver
    # that exited lost its parameters; the JobSet fails with its Job and the lifecycle decides.
    ps_spec = pod_spec(job, settings, ns, "pserver", image=image, env=env, port=settings.pserver_port,
                       restart_policy="Never", pull_secrets=pull_secrets, grace_seconds=grace_seconds)
    ps_spec["subdomain"] = name
    pservers: Obj = {"completionMode": "Indexed", "completions": job.pservers, "parallelism": job.pservers,
                     "backoffLimit": 0, "template": _template(job, settings, "pserver", attempt, ps_spec)}
    trainers = _trainer_spec(job, settings, ns, name, image=image, runtime_ready=runtime_ready,
                             pull_secrets=pull_secrets, grace_seconds=grace_seconds, attempt=attempt)
    replicated = [{"name": role, "replicas": 1,
                   "template": {"metadata": {"labels": labels(job, role, attempt=attempt)}, "spec": spec}}
                  for role, spec in (("pserver", pservers), ("trainer", trainers))]
    return {"apiVersion": "/".join(gang.JOBSET_API[:2]), "kind": "JobSet",
            "metadata": object_meta(name, ns, {**labels(job, attempt=attempt), **gang.workload_labels(settings)},
                                    owner),
            "spec": {"suspend": True, "replicatedJobs": replicated,
                     "successPolicy": {"operator": "All", "targetReplicatedJobs": ["trainer"]},
                     "failurePolicy": {"maxRestarts": 0},
                     # The JobSet controller makes the headless Service <name> for these host names.
                     "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True}}}


def podgroup(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, attempt: int = 0) -> Obj:
    """Volcano's gang: every replica of the attempt, with what they request together."""
    from quotas.units import cpu_millicores, memory_bytes

    cpu = cpu_millicores(job.cpu) * job.trainers + (cpu_millicores(job.pscpu) * job.pservers if job.pservers else 0)
    mem = memory_bytes(job.memory) * job.trainers + (memory_bytes(job.psmemory) * job.pservers if job.pservers else 0)
    res = {"cpu": f"{cpu}m", "memory": str(mem)}
    if job.gpu:
        res["nvidia.com/gpu"] = str(job.gpu * job.trainers)
    md = object_meta(podgroup_name(job, attempt), ns, labels(job, attempt=attempt), owner)
    return gang.podgroup(settings, md, members=job.pservers + job.trainers, resources=res)


# --- optional: Kubeflow PaddleJob (the runtime image build is in backends/kubernetes/build.py) ---------
def paddle_job(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, *, image: str, runtime_ready: bool,
               pull_secrets: list[str], grace_seconds: int, attempt: int = 0) -> Obj:
    """A Kubeflow training-operator PaddleJob (kubeflow.org/v1): Master = pservers, Worker =
    trainers. The operator names pods and Services <job>-master-<i> / <job>-worker-<i>."""
    replicas: Obj = {}
    for role, kind, count in (("pserver", "Master", job.pservers), ("trainer", "Worker", job.trainers)):
        if not count:
            continue
        port = settings.pserver_port if role == "pserver" else settings.trainer_port
        env = replica_env(job, settings, ns, role, runtime_ready=runtime_ready, attempt=attempt)
        spec = pod_spec(job, settings, ns, role, image=image, env=env, port=port, restart_policy="Never",
                        pull_secrets=pull_secrets, grace_seconds=grace_seconds)
        # The operator takes the rendezvous port from the port named "master".
        spec["containers"][0]["ports"][0]["name"] = "master"
        replicas[kind] = {"replicas": count, "restartPolicy": "Never",
                          "template": {"metadata": {"labels": labels(job, role, attempt=attempt)}, "spec": spec}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob",
            "metadata": object_meta(paddle_job_name(job, attempt), ns, labels(job, attempt=attempt), owner),
            "spec": {"runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0}, "paddleReplicaSpecs": replicas}}
