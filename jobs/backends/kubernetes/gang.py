"""Gang scheduling handed to a scheduler installed in the cluster (the datacenter's
`gang_scheduler`), so a job never half-starts on a busy cluster. Each is an add-on to the job's
layout (layouts/): it marks the workloads the layout makes, may add objects of its own, and says
why the job waits while the scheduler holds it back. Pure but for what the watches saw.

- volcano (scheduling.volcano.sh/v1beta1): one PodGroup per job attempt, minMember = every
  replica and minResources = their requests; every pod names it (annotation
  scheduling.k8s.io/group-name) and runs with `schedulerName: volcano`. Volcano binds all of them
  or none, so every pod must exist at once: trainers never wait for the pservers here.
- kueue (kueue.x-k8s.io/v1beta1): the job's one JobSet is created suspended with the
  `kueue.x-k8s.io/queue-name` label; Kueue admits it as one Workload (a PodSet per replicated
  job) once its LocalQueue has quota for all of it, and owns `suspend` from then on.

While pods wait, the scheduler's own words explain why: a PodGroup's Unschedulable condition, a
Kueue Workload's QuotaReserved/Admitted conditions, and, before Kueue has made a Workload at
all, that the job waits for its admission (and whether Kueue is installed). The moment the
scheduler let the job go starts the pods' pending timeout (jobs/lifecycle/waiting.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .manifests import labels, object_meta, podgroup_name
from .status import parse_time

if TYPE_CHECKING:
    from ...models import Job
    from .config import K8sSettings

Obj = dict[str, Any]
VOLCANO, KUEUE = "volcano", "kueue"
PODGROUP, WORKLOAD = "PodGroup", "Workload"
PODGROUP_API = ("scheduling.volcano.sh", "v1beta1", "podgroups")
WORKLOAD_API = ("kueue.x-k8s.io", "v1beta1", "workloads")
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class Verdict:
    """What the gang scheduler says of a job attempt: held back (why), or let go (since when)."""

    held: bool
    reason: str = ""
    message: str = ""
    since: datetime | None = None


@dataclass(frozen=True)
class Watched:
    """A kind the watcher must list and watch for this add-on, cluster-wide."""

    kind: str
    api: tuple[str, str, str]  # group, version, plural
    ours_by_label: bool  # False: not labelled by us, attributed to the job of its owner


def _true(conditions: list[Obj], kind: str) -> Obj | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


class Gang:
    """No gang scheduler: the cluster's default scheduler places each pod as it comes."""

    name = "none"
    all_at_once = False  # every pod of an attempt must exist together (the scheduler binds all or none)
    owns_suspend = False  # the scheduler suspends and resumes the workloads: never patch `suspend`
    watched: Watched | None = None

    def __init__(self, settings: K8sSettings):
        self.settings = settings

    def decorate(self, workload: Obj, templates: list[Obj], job: Job, attempt: int) -> None:
        """Mark a workload the layout makes (in place); `templates` are its pod templates."""

    def objects(self, job: Job, ns: str, owner: Obj | None, attempt: int) -> list[Obj]:
        """Objects of its own, made with the attempt's (and deleted with them)."""
        return []

    def names(self, job: Job, attempt: int) -> list[tuple[str, str]]:
        """(kind, name) of those objects."""
        return []

    def group_name(self, job: Job, attempt: int, workload: str) -> tuple[str, str, bool] | None:
        """(kind, name, by owner) of what the scheduler reports on: an object of that name, or
        the one owned by the workload named so."""
        return None

    def verdict(self, group: Obj | None, *, known: bool, absent: bool) -> Verdict | None:
        """From the scheduler's object (None: none seen; `known`: its kind is watched and
        listed; `absent`: the cluster does not serve the kind). None: nothing to say."""
        return None


class Volcano(Gang):
    name = VOLCANO
    all_at_once = True
    watched = Watched(PODGROUP, PODGROUP_API, ours_by_label=True)

    def decorate(self, workload: Obj, templates: list[Obj], job: Job, attempt: int) -> None:
        for tpl in templates:
            tpl.setdefault("metadata", {}).setdefault("annotations", {})[GROUP_ANNOTATION] = podgroup_name(job, attempt)
            tpl["spec"]["schedulerName"] = VOLCANO

    def objects(self, job: Job, ns: str, owner: Obj | None, attempt: int) -> list[Obj]:
        return [podgroup(job, self.settings, ns, owner, attempt)]

    def names(self, job: Job, attempt: int) -> list[tuple[str, str]]:
        return [(PODGROUP, podgroup_name(job, attempt))]

    def group_name(self, job: Job, attempt: int, workload: str) -> tuple[str, str, bool] | None:
        return PODGROUP, podgroup_name(job, attempt), False

    def verdict(self, group: Obj | None, *, known: bool, absent: bool) -> Verdict | None:
        if not group:
            return None
        status = group.get("status") or {}
        conditions = status.get("conditions") or []
        if status.get("phase") in ("Running", "Completed"):
            scheduled = _true(conditions, "Scheduled") or {}
            return Verdict(False, since=parse_time(scheduled.get("lastTransitionTime")))
        cond = _true(conditions, "Unschedulable")
        if cond:
            why = cond.get("message") or cond.get("reason") or "not enough resources"
            return Verdict(True, "GangUnschedulable", f"Volcano: {why}")
        if status.get("phase") in ("Pending", "Inqueue"):
            return Verdict(True, "GangPending",
                           f"Volcano: the job's pods wait to be scheduled together ({status['phase']})")
        return None


class Kueue(Gang):
    name = KUEUE
    owns_suspend = True
    watched = Watched(WORKLOAD, WORKLOAD_API, ours_by_label=False)

    def decorate(self, workload: Obj, templates: list[Obj], job: Job, attempt: int) -> None:
        workload["metadata"].setdefault("labels", {})[QUEUE_LABEL] = self.settings.kueue_queue
        workload["spec"]["suspend"] = True  # Kueue unsuspends it once admitted

    def group_name(self, job: Job, attempt: int, workload: str) -> tuple[str, str, bool] | None:
        return "JobSet", workload, True

    def verdict(self, group: Obj | None, *, known: bool, absent: bool) -> Verdict | None:
        if absent:
            return Verdict(True, "KueueQueued", f"Kueue: waiting for admission, but the cluster serves no Kueue "
                                                f"Workloads ({'/'.join(WORKLOAD_API[:2])}): is Kueue installed?")
        if not group:
            if not known:
                return None
            return Verdict(True, "KueueQueued", f"Kueue: waiting for admission (no Workload for the job yet: "
                                                f"is the LocalQueue '{self.settings.kueue_queue}' in the namespace?)")
        conditions = (group.get("status") or {}).get("conditions") or []
        admitted = _true(conditions, "Admitted")
        if admitted:
            return Verdict(False, since=parse_time(admitted.get("lastTransitionTime")))
        evicted = _true(conditions, "Evicted")
        if evicted:
            return Verdict(True, "KueueEvicted", f"Kueue: {evicted.get('message') or 'evicted'}")
        reserved = next((c for c in conditions if c.get("type") == "QuotaReserved"), None)
        if reserved and reserved.get("status") == "False":
            why = reserved.get("message") or reserved.get("reason") or "waiting for quota"
            return Verdict(True, "KueueQueued", f"Kueue: {why}")
        return Verdict(True, "KueueQueued", "Kueue: waiting for the LocalQueue to admit the job")


ADD_ONS: dict[str, type[Gang]] = {"none": Gang, VOLCANO: Volcano, KUEUE: Kueue}


def for_settings(settings: K8sSettings) -> Gang:
    return ADD_ONS[settings.gang_scheduler](settings)


def podgroup(job: Job, settings: K8sSettings, ns: str, owner: Obj | None, attempt: int = 0) -> Obj:
    """Volcano's gang: every replica of the attempt, with what they request together."""
    from quotas.units import cpu_millicores, memory_bytes

    cpu = cpu_millicores(job.cpu) * job.trainers + (cpu_millicores(job.pscpu) * job.pservers if job.pservers else 0)
    mem = memory_bytes(job.memory) * job.trainers + (memory_bytes(job.psmemory) * job.pservers if job.pservers else 0)
    res = {"cpu": f"{cpu}m", "memory": str(mem)}
    if job.gpu:
        res["nvidia.com/gpu"] = str(job.gpu * job.trainers)
    spec: Obj = {"minMember": job.pservers + job.trainers, "minResources": res}
    if settings.volcano_queue:
        spec["queue"] = settings.volcano_queue
    if settings.priority_class_name:
        spec["priorityClassName"] = settings.priority_class_name
    return {"apiVersion": "/".join(PODGROUP_API[:2]), "kind": PODGROUP,
            "metadata": object_meta(podgroup_name(job, attempt), ns, labels(job, attempt=attempt), owner),
            "spec": spec}
