"""Gang scheduling handed to the cluster's own scheduler (the datacenter's `gang_scheduler`), so a
job never half-starts on a busy cluster. Pure: manifests.py and observe.py call these.

- volcano: one PodGroup (scheduling.volcano.sh/v1beta1) per job attempt, minMember = every
  replica and minResources = their requests; every pod names it (annotation
  scheduling.k8s.io/group-name) and `schedulerName: volcano`. Volcano binds all of them or none.
- kueue: Kueue admits a workload whole once its LocalQueue has quota for all of it. A collective
  job's trainer Job is created suspended with the `kueue.x-k8s.io/queue-name` label; Kueue
  unsuspends it once every index is admitted. A parameter-server job runs as one JobSet
  (jobset.x-k8s.io/v1alpha2, workloads.jobset), suspended and labelled alike: Kueue admits it as one
  Workload with a PodSet per replicated job (pservers and trainers), so pservers never hold
  their place while trainers wait. This needs the JobSet controller installed on the cluster.

While pods wait, the scheduler's own words explain why: a PodGroup's Unschedulable condition,
a Kueue Workload's QuotaReserved/Admitted conditions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import K8sSettings

Obj = dict[str, Any]
VOLCANO, KUEUE = "volcano", "kueue"
PODGROUP_API = ("scheduling.volcano.sh", "v1beta1", "podgroups")
WORKLOAD_API = ("kueue.x-k8s.io", "v1beta1", "workloads")
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# A replica's reason while the scheduler holds the job back (never a pending timeout: it queues).
# SchedulingGated: a pod's own reason while a scheduling gate holds it (Kueue gates the pods of
# the StatefulSets and pod groups it has not admitted yet).
REASONS = frozenset({"GangUnschedulable", "GangPending", "KueueQueued", "KueueEvicted", "SchedulingGated"})


def enabled(settings: K8sSettings) -> bool:
    return settings.gang_scheduler in (VOLCANO, KUEUE)


def uses_jobset(settings: K8sSettings, pservers: int) -> bool:
    """Whether a job with `pservers` runs as one JobSet: Kueue admits a JobSet whole, but a Job
    and a StatefulSet only as two workloads (collective jobs are one Job: unchanged)."""
    return settings.gang_scheduler == KUEUE and pservers > 0 and not settings.kubeflow


def pod_template(settings: K8sSettings, group: str, annotations: dict[str, str], spec: Obj) -> None:
    """What every pod of a gang-scheduled job carries (in place)."""
    if settings.gang_scheduler == VOLCANO:
        annotations[GROUP_ANNOTATION] = group
        spec["schedulerName"] = VOLCANO


def workload_labels(settings: K8sSettings) -> dict[str, str]:
    """Labels of the Job, StatefulSet or JobSet themselves: Kueue picks its workloads by these."""
    return {QUEUE_LABEL: settings.kueue_queue} if settings.gang_scheduler == KUEUE else {}


def podgroup(settings: K8sSettings, meta: Obj, *, members: int, resources: dict[str, str]) -> Obj:
    spec: Obj = {"minMember": members, "minResources": resources}
    if settings.volcano_queue:
        spec["queue"] = settings.volcano_queue
    if settings.priority_class_name:
        spec["priorityClassName"] = settings.priority_class_name
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": spec}


def _true(conditions: list[Obj], kind: str) -> Obj | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def waiting_reason(group: Obj | None) -> tuple[str, str] | None:
    """Why the scheduler holds a job's pods back, from its PodGroup or Kueue Workload; None when
    it does not (admitted, scheduled, or nothing known yet)."""
    if not group:
        return None
    status = group.get("status") or {}
    conditions = status.get("conditions") or []
    if group.get("kind") == "PodGroup":
        if status.get("phase") in ("Running", "Completed"):
            return None
        cond = _true(conditions, "Unschedulable")
        if cond:
            why = cond.get("message") or cond.get("reason") or "not enough resources"
            return "GangUnschedulable", f"Volcano: {why}"
        if status.get("phase") in ("Pending", "Inqueue"):
            return "GangPending", f"Volcano: the job's pods wait to be scheduled together ({status['phase']})"
        return None
    if _true(conditions, "Admitted"):
        return None
    if _true(conditions, "Evicted"):
        cond = _true(conditions, "Evicted") or {}
        return "KueueEvicted", f"Kueue: {cond.get('message') or 'evicted'}"
    reserved = next((c for c in conditions if c.get("type") == "QuotaReserved"), None)
    if reserved and reserved.get("status") == "False":
        return "KueueQueued", f"Kueue: {reserved.get('message') or reserved.get('reason') or 'waiting for quota'}"
    return "KueueQueued", "Kueue: waiting for the LocalQueue to admit the job"
