"""What every layout (a workload shape: which Kubernetes objects a job attempt is made of) does,
in the manner of Kubeflow Trainer's runtime plugins: the backend and the watcher talk to this
interface only, and the datacenter's gang scheduler add-on (../gang.py) marks what a layout
makes, adds its own objects and explains the waiting.

A layout says where its pods are found (host names, known before they exist), makes and deletes
an attempt's objects, suspends and resumes them, stops a role, takes the job a step on once it may
(a layout whose trainers wait for the pservers), and tells the observation (../observe.py) which
object makes a role's pods and why a replica that has no pod yet waits.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ...base import ReplicaStatus
from .. import manifests
from ..gang import Gang
from ..manifests import Hosts
from ..workloads import PodOptions, pod_templates

if TYPE_CHECKING:
    from ....models import Job
    from ...contract import Topology
    from ..config import K8sSettings
    from ..context import ClusterContext
    from ..informer import ClusterState

Obj = dict[str, Any]
WORKLOAD_KINDS = frozenset({"StatefulSet", "Job", "JobSet"})


class Shape(Protocol):
    """What a layout reads of a job to say why a replica waits (a Job, or observe's JobFacts)."""

    @property
    def pservers(self) -> int: ...

    @property
    def trainers(self) -> int: ...

    @property
    def mode(self) -> str: ...


class Layout(ABC):
    name: ClassVar[str]

    def __init__(self, settings: K8sSettings, gang: Gang):
        self.settings = settings
        self.gang = gang

    # --- where the pods are, what an attempt is made of (pure) -----------------------------------
    @abstractmethod
    def hosts(self, job: Job, ns: str, attempt: int) -> Hosts:
        """Host name patterns of the attempt's pods."""

    def topology(self, job: Job, ns: str, attempt: int) -> Topology:
        return manifests.topology(job, self.settings, self.hosts(job, ns, attempt))

    @abstractmethod
    def workloads(self, job: Job, ns: str, owner: Obj | None, attempt: int, opts: PodOptions) -> list[Obj]:
        """The layout's own objects of the attempt, in creation order, unmarked."""

    @abstractmethod
    def names(self, job: Job, attempt: int) -> list[tuple[str, str]]:
        """(kind, name) of the layout's own objects of an attempt."""

    def deferred(self, job: Job) -> Collection[str]:
        """Kinds of the layout's objects that advance() makes later, not launch."""
        return ()

    def marked(self, obj: Obj, job: Job, attempt: int) -> Obj:
        """`obj` with the gang add-on's marks, if it is a workload."""
        if obj["kind"] in WORKLOAD_KINDS:
            self.gang.decorate(obj, list(pod_templates(obj)), job, attempt)
        return obj

    def manifests(self, job: Job, ns: str, owner: Obj | None, attempt: int, opts: PodOptions) -> list[Obj]:
        """Every object of the attempt, in creation order: the add-on's, then the layout's, marked."""
        return [*self.gang.objects(job, ns, owner, attempt),
                *(self.marked(obj, job, attempt) for obj in self.workloads(job, ns, owner, attempt, opts))]

    # --- on the cluster --------------------------------------------------------------------------
    def create(self, ctx: ClusterContext, job: Job, ns: str, owner: Obj, attempt: int, opts: PodOptions) -> None:
        """Make the attempt's objects; those that exist (suspended earlier in this attempt) resume."""
        later = self.deferred(job)
        for body in self.manifests(job, ns, owner, attempt, opts):
            if body["kind"] not in later and not ctx.api.create_object(body):
                self.resume(ctx, job, body)

    def resume(self, ctx: ClusterContext, job: Job, body: Obj) -> None:  # noqa: B027 - optional
        """`body`'s object existed already: undo what suspend() did to it (nothing by default)."""

    def delete(self, ctx: ClusterContext, job: Job, ns: str, attempt: int) -> None:
        """Every object of one attempt (the root, and what all attempts share, stay)."""
        for kind, name in [*self.names(job, attempt), *self.gang.names(job, attempt)]:
            ctx.api.delete_object(kind, name, ns)

    def suspend(self, ctx: ClusterContext, job: Job, ns: str, attempt: int) -> None:
        """Stop every pod gracefully and free what the attempt holds: by default, delete it."""
        self.delete(ctx, job, ns, attempt)

    def stop_roles(self, ctx: ClusterContext, job: Job, ns: str, attempt: int, roles: Collection[str]) -> None:
        """Stop the pods of these roles (a gang restart: both; the pservers once the trainers are
        done): by default the whole attempt goes."""
        self.delete(ctx, job, ns, attempt)

    def advance(self, ctx: ClusterContext, job: Job, ns: str, attempt: int, state: ClusterState,
                options: Callable[[], PodOptions]) -> bool:
        """Make what waits for the job's progress (deferred()); True once nothing waits."""
        return True

    # --- what the watches see (pure) -------------------------------------------------------------
    @abstractmethod
    def controller(self, job: Job, role: str, attempt: int) -> tuple[str, str]:
        """(kind, name) of the object that makes `role`'s pods in this attempt."""

    def unstarted(self, job: Shape, role: str, controllers: Mapping[str, Obj | None]) -> ReplicaStatus | None:
        """Why a replica of `role` that has no pod waits, from the roles' controllers; None: no
        reason known."""
        return None
