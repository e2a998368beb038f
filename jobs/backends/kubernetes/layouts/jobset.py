"""The JobSet layout (jobset.x-k8s.io/v1alpha2, the JobSet controller 0.8+ installed): one JobSet
`<job>` per attempt, with a replicated job `pserver` (an Indexed Job) and `trainer` (the same
Indexed Job as the plain layout's), pod i being `<job>-<role>-0-<i>.<job>.<ns>.svc` through the
headless Service the JobSet controller makes. The trainers' Job `dependsOn` the pservers being
Ready, so the JobSet controller keeps seed 001's order itself. One object is one workload for a
queue (Kueue admits pservers and trainers together or not at all), and it goes as one: suspend
and a gang restart delete it, resume and the next attempt make a new one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ...base import ReplicaStatus
from .. import workloads
from ..informer import JOB
from ..manifests import Hosts, jobset_job_name, jobset_name
from ..workloads import PodOptions
from .base import Layout, Obj, Shape
from .plain import waiting_for_pservers

if TYPE_CHECKING:
    from ....models import Job


def ready_pods(job_obj: Obj | None) -> int:
    """An Indexed Job's pods that are ready (the Job controller counts them, 1.24+)."""
    return int(((job_obj or {}).get("status") or {}).get("ready") or 0)


class JobSetLayout(Layout):
    name = "jobset"

    def hosts(self, job: Job, ns: str, attempt: int) -> Hosts:
        js, domain = jobset_name(job, attempt), self.settings.service_domain(ns)
        return Hosts(f"{jobset_job_name(job, 'pserver', attempt)}-{{i}}.{js}.{domain}",
                     f"{jobset_job_name(job, 'trainer', attempt)}-{{i}}.{js}.{domain}")

    def workloads(self, job: Job, ns: str, owner: Obj | None, attempt: int, opts: PodOptions) -> list[Obj]:
        return [workloads.jobset(job, self.settings, ns, owner, self.hosts(job, ns, attempt), opts, attempt)]

    def names(self, job: Job, attempt: int) -> list[tuple[str, str]]:
        return [("JobSet", jobset_name(job, attempt))]

    def controller(self, job: Job, role: str, attempt: int) -> tuple[str, str]:
        return JOB, jobset_job_name(job, role, attempt)

    def unstarted(self, job: Shape, role: str, controllers: Mapping[str, Obj | None]) -> ReplicaStatus | None:
        pservers = controllers.get("pserver")
        if role != "trainer" or controllers.get("trainer") is not None or pservers is None \
                or job.mode != "ps" or (pservers.get("spec") or {}).get("suspend"):
            return None
        return waiting_for_pservers(job, pservers, ready_pods(pservers))
