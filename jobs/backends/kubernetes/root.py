"""The job's root ConfigMap `<job>`: the owner of every other object of the job, so deleting it
deletes them all (the garbage collector's cascade), and the mark that the job's objects are
this job's (its job-id label) and not those of an earlier job of the same name."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..base import LaunchError
from . import manifests
from .context import ClusterContext

if TYPE_CHECKING:
    from ...models import Job

Obj = dict[str, Any]
ROOT_WAIT_SECONDS = 30
DELETE_WAIT_SECONDS = 60


def ours(root: Obj | None, job_id: int) -> bool:
    return root is not None and (root["metadata"].get("labels") or {}).get(manifests.LABEL_JOB_ID) == str(job_id)


def read(ctx: ClusterContext, name: str, ns: str) -> Obj | None:
    return ctx.api.raw(ctx.api.core.read_namespaced_config_map, name, ns)


def ensure(ctx: ClusterContext, job: Job, ns: str) -> Obj:
    """The job's root. One left by an earlier job of the same name is waited out while the
    cluster deletes it, then the answer is a clear error."""
    api = ctx.api
    body = manifests.root(job, ns)
    name = body["metadata"]["name"]
    deadline = time.monotonic() + ROOT_WAIT_SECONDS
    while True:
        created = api.create(api.core.create_namespaced_config_map, ns, body=body)
        if created is not None:
            assert created.metadata is not None  # the API server sets it on every object
            return {"metadata": {"name": created.metadata.name, "uid": created.metadata.uid}}
        existing = read(ctx, name, ns)
        if existing is None:
            continue  # deleted between the two calls
        if ours(existing, job.pk):
            return existing  # from an earlier attempt
        if not existing["metadata"].get("deletionTimestamp"):
            # Left by a job whose row is gone (deleted while the cluster was unreachable).
            api.delete(api.core.delete_namespaced_config_map, name, ns, propagation="Foreground")
        if time.monotonic() > deadline:
            raise LaunchError("NameInUse", f"the cluster is still deleting the objects of an earlier job named "
                                           f"'{job.name}'; submit again in a minute, or use another name")
        time.sleep(1)


def stop(ctx: ClusterContext, job: Job, ns: str) -> None:
    """Everything of the job goes: one delete of its root, the garbage collector does the rest."""
    if ours(read(ctx, manifests.root_name(job), ns), job.pk):
        ctx.api.delete_object("ConfigMap", manifests.root_name(job), ns)


def delete(ctx: ClusterContext, job: Job, ns: str) -> None:
    """A foreground delete of the root, waited for, so the name is free when the job row goes."""
    api, name = ctx.api, manifests.root_name(job)
    deadline = time.monotonic() + DELETE_WAIT_SECONDS
    while True:
        root = read(ctx, name, ns)
        if not ours(root, job.pk):
            return
        assert root is not None
        if not root["metadata"].get("deletionTimestamp"):
            api.delete(api.core.delete_namespaced_config_map, name, ns, propagation="Foreground")
        if time.monotonic() > deadline:
            # The task fails and the periodic reconcile tries again; the name stays taken.
            raise LaunchError("DeleteTimeout", f"the cluster has not finished deleting job {job.name}")
        time.sleep(0.5)


def sweep(ctx: ClusterContext, name: str, ns: str, job_id: int) -> None:
    """Delete the root of a job whose row is gone (the watcher's safety net)."""
    if ours(read(ctx, name, ns), job_id):
        ctx.api.delete_object("ConfigMap", name, ns)
