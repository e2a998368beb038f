"""The plain layout: nothing but Kubernetes itself. Pservers are a StatefulSet behind a headless
Service, so pserver i is `<job>-pserver-<i>.<job>-pserver.<ns>.svc` before it starts; trainers an
Indexed Job behind another (`<job>-trainer-<i>.<job>-trainer...`), made by advance() once every
pserver is ready (seed 001's order), or at once for a collective job or a gang scheduler that
binds all pods or none. Suspend scales the StatefulSet to 0 and sets the Job's `spec.suspend`
(their controllers delete the pods gracefully); resume undoes both."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from ....models import ReplicaState
from ...base import ReplicaStatus
from .. import manifests, workloads
from ..informer import JOB, STATEFULSET
from ..manifests import Hosts, pserver_name, trainer_name
from ..status import meta, parse_time, ready_replicas
from ..workloads import PodOptions
from .base import Layout, Obj, Shape

if TYPE_CHECKING:
    from ....models import Job
    from ..context import ClusterContext
    from ..informer import ClusterState


WAITING_FOR_PSERVERS = "WaitingForPservers"


def waiting_for_pservers(job: Shape, pservers: Obj | None, ready: int) -> ReplicaStatus:
    since: datetime | None = parse_time(meta(pservers).get("creationTimestamp")) if pservers else None
    return ReplicaStatus(ReplicaState.PENDING, None, WAITING_FOR_PSERVERS,
                         f"trainers start when all {job.pservers} pservers are ready ({ready} ready)",
                         pending_since=since, blocked=True, behind_others=True)


class Plain(Layout):
    name = "plain"

    def hosts(self, job: Job, ns: str, attempt: int) -> Hosts:
        domain = self.settings.service_domain(ns)
        ps, tr = pserver_name(job, attempt), trainer_name(job, attempt)
        return Hosts(f"{ps}-{{i}}.{ps}.{domain}", f"{tr}-{{i}}.{tr}.{domain}", named_pservers=True)

    def waits_for_pservers(self, job: Shape) -> bool:
        return bool(job.pservers) and job.mode == "ps" and not self.gang.all_at_once

    def deferred(self, job: Job) -> Collection[str]:
        return ("Job",) if self.waits_for_pservers(job) else ()

    def workloads(self, job: Job, ns: str, owner: Obj | None, attempt: int, opts: PodOptions) -> list[Obj]:
        hosts, st = self.hosts(job, ns, attempt), self.settings
        out = []
        if job.pservers:
            out += [manifests.headless_service(job, ns, "pserver", st.pserver_port, owner, attempt),
                    workloads.pserver_statefulset(job, st, ns, owner, hosts, opts, attempt)]
        return [*out, manifests.headless_service(job, ns, "trainer", st.trainer_port, owner, attempt),
                workloads.trainer_job(job, st, ns, owner, hosts, opts, attempt)]

    def names(self, job: Job, attempt: int) -> list[tuple[str, str]]:
        ps, tr = pserver_name(job, attempt), trainer_name(job, attempt)
        return [*([("StatefulSet", ps), ("Service", ps)] if job.pservers else []), ("Job", tr), ("Service", tr)]

    def resume(self, ctx: ClusterContext, job: Job, body: Obj) -> None:
        name, ns = body["metadata"]["name"], body["metadata"]["namespace"]
        if body["kind"] == "StatefulSet":
            ctx.api.patch_object("StatefulSet", name, ns, {"spec": {"replicas": job.pservers}})
        elif body["kind"] == "Job" and not self.gang.owns_suspend:
            ctx.api.patch_object("Job", name, ns, {"spec": {"suspend": False}})

    def suspend(self, ctx: ClusterContext, job: Job, ns: str, attempt: int) -> None:
        if self.gang.owns_suspend:
            self.delete(ctx, job, ns, attempt)
            return
        if job.pservers:
            ctx.api.patch_object("StatefulSet", pserver_name(job, attempt), ns, {"spec": {"replicas": 0}})
        ctx.api.patch_object("Job", trainer_name(job, attempt), ns, {"spec": {"suspend": True}})
        # A waiting PodGroup holds a place in the scheduler's queue: a suspended job gives it up.
        for kind, name in self.gang.names(job, attempt):
            ctx.api.delete_object(kind, name, ns)

    def stop_roles(self, ctx: ClusterContext, job: Job, ns: str, attempt: int, roles: Collection[str]) -> None:
        if "pserver" in roles:
            ctx.api.delete_object("StatefulSet", pserver_name(job, attempt), ns)
        if "trainer" in roles:
            ctx.api.delete_object("Job", trainer_name(job, attempt), ns)

    def advance(self, ctx: ClusterContext, job: Job, ns: str, attempt: int, state: ClusterState,
                options: Callable[[], PodOptions]) -> bool:
        """Make (or resume) the trainers once every pserver of the attempt is ready."""
        if not self.waits_for_pservers(job):
            return True
        trainers = state.workload(JOB, ns, trainer_name(job, attempt))
        if trainers is not None and not (trainers.get("spec") or {}).get("suspend"):
            return True
        pservers = state.workload(STATEFULSET, ns, pserver_name(job, attempt))
        if pservers is None or meta(pservers).get("deletionTimestamp") or ready_replicas(pservers) < job.pservers:
            return False
        root = next((r for r in meta(pservers).get("ownerReferences") or [] if r.get("kind") == "ConfigMap"), None)
        if root is None:
            return False
        owner = manifests.owner_reference({"metadata": {"name": root["name"], "uid": root["uid"]}})
        body = self.marked(workloads.trainer_job(job, self.settings, ns, owner, self.hosts(job, ns, attempt),
                                                 options(), attempt), job, attempt)
        if not ctx.api.create_object(body):
            self.resume(ctx, job, body)  # made in this attempt before a suspend
        return True

    def controller(self, job: Job, role: str, attempt: int) -> tuple[str, str]:
        if role == "pserver":
            return STATEFULSET, pserver_name(job, attempt)
        return JOB, trainer_name(job, attempt)

    def unstarted(self, job: Shape, role: str, controllers: Mapping[str, Obj | None]) -> ReplicaStatus | None:
        if role != "trainer" or controllers.get("trainer") is not None or not self.waits_for_pservers(job):
            return None
        pservers = controllers.get("pserver")
        return waiting_for_pservers(job, pservers, ready_replicas(pservers))
