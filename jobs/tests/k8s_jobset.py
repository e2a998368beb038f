"""The JobSet controller (jobset.x-k8s.io/v1alpha2) in the emulator, as far as the backend relies
on it, run by the store on every change (Store.controllers):

- a new JobSet gets its headless Service `<subdomain>` (network.enableDNSHostnames) and one Job
  per replica of each replicated job, `<jobset>-<rj>-<j>`, owned by the JobSet (cascade delete),
  with the controller's labels and annotations on the Job and its pod template, and the pod
  template's `subdomain` set, so an Indexed Job's pod i is `<jobset>-<rj>-<j>-<i>.<subdomain>`;
  a replicated job that `dependsOn` another's being Ready gets its Jobs once every Job of that
  one has all its pods ready (the Job's `status.ready`, kept here from its pods);
- `spec.suspend` of the JobSet is propagated to its Jobs (Kueue unsuspends the JobSet);
- a child Job is Complete once every index has a Succeeded pod, Failed once a pod fails where it
  has no retries (backoffLimit 0 without backoffLimitPerIndex; per-index retries are played by
  Cluster.trainer_failed);
- the JobSet is Failed when a Job fails (failurePolicy.maxRestarts 0 here), Completed when its
  successPolicy is met; either way its Jobs still active are deleted (their pods go with them).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import kmock

from jobs.backends.kubernetes.manifests import COMPLETION_INDEX

from .k8s_store import now

if TYPE_CHECKING:
    from .k8s_store import Store

Obj = dict[str, Any]
API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
RJ_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
RJ_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def _condition(obj: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def finished(job: Obj) -> bool:
    return _condition(job, "Complete") or _condition(job, "Failed")


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def _owner_ref(owner: Obj) -> Obj:
    md = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": md["name"], "uid": md["uid"],
            "controller": True, "blockOwnerDeletion": True}


class JobSetController:
    def __init__(self, store: Store):
        self.store = store

    def __call__(self, plural: str, obj: Obj) -> None:
        md = obj["metadata"]
        if md.get("deletionTimestamp"):
            return
        if plural == "jobsets":
            self._reconcile(obj)
        elif plural == "jobs" and JOBSET_NAME in (md.get("labels") or {}):
            self._finish(md["namespace"], md["labels"][JOBSET_NAME])
            js = self.store.objects.get(("jobsets", md["namespace"], md["labels"][JOBSET_NAME]))
            if js is not None and not js["metadata"].get("deletionTimestamp"):
                self._reconcile(copy.deepcopy(js))  # a dependency may be Ready now
        elif plural == "pods":
            self._job_of(obj)

    # --- the JobSet ---------------------------------------------------------------------------
    def children(self, ns: str, jobset: str) -> list[Obj]:
        return self.store.find("jobs", ns, f"{JOBSET_NAME}={jobset}")

    def _reconcile(self, js: Obj) -> None:
        md, spec = js["metadata"], js["spec"]
        ns, name = md["namespace"], md["name"]
        if (js.get("status") or {}).get("terminalState"):
            return
        network = spec.get("network") or {}
        subdomain = network.get("subdomain") or name
        if network.get("enableDNSHostnames") and ("services", ns, subdomain) not in self.store.objects:
            self.store.create("services", ns, {
                "metadata": {"name": subdomain, "labels": {JOBSET_NAME: name}, "ownerReferences": [_owner_ref(js)]},
                "spec": {"clusterIP": "None", "selector": {JOBSET_NAME: name},
                         "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)}})
        suspend = bool(spec.get("suspend"))
        for rj in spec["replicatedJobs"]:
            if not all(self._ready(ns, name, dep["name"]) for dep in rj.get("dependsOn") or []
                       if dep["status"] == "Ready"):
                continue
            for j in range(rj.get("replicas", 1)):
                job_name = f"{name}-{rj['name']}-{j}"
                if ("jobs", ns, job_name) in self.store.objects:
                    child = self.store.get("jobs", ns, job_name)
                    if bool(child["spec"].get("suspend")) != suspend and not finished(child):
                        self.store.patch("jobs", ns, job_name, {"spec": {"suspend": suspend}})
                    continue
                ours = {JOBSET_NAME: name, RJ_NAME: rj["name"], RJ_REPLICAS: str(rj.get("replicas", 1)),
                        JOB_INDEX: str(j)}
                marks = {**ours, JOBSET_UID: md["uid"], RESTART_ATTEMPT: "0"}
                tpl = copy.deepcopy(rj["template"])
                job_spec = tpl["spec"]
                job_spec["suspend"] = suspend
                pod_md = job_spec["template"].setdefault("metadata", {})
                pod_md["labels"] = {**(pod_md.get("labels") or {}), **ours}
                pod_md["annotations"] = {**(pod_md.get("annotations") or {}), **marks}
                if network.get("enableDNSHostnames"):
                    job_spec["template"]["spec"]["subdomain"] = subdomain
                tmd = tpl.get("metadata") or {}
                self.store.create("jobs", ns, {
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": job_name, "labels": {**(tmd.get("labels") or {}), **ours},
                                 "annotations": {**(tmd.get("annotations") or {}), **marks},
                                 "ownerReferences": [_owner_ref(js)]},
                    "spec": job_spec})

    def _ready(self, ns: str, jobset: str, rj: str) -> bool:
        jobs = [j for j in self.children(ns, jobset) if j["metadata"]["labels"][RJ_NAME] == rj]
        return bool(jobs) and all((j.get("status") or {}).get("ready", 0) >= (j["spec"].get("parallelism") or 1)
                                  for j in jobs)

    def _finish(self, ns: str, name: str) -> None:
        """Failed on a failed Job; Completed once the successPolicy's Jobs all completed."""
        try:
            js = self.store.get("jobsets", ns, name)
        except kmock.KubernetesError:
            return
        if (js.get("status") or {}).get("terminalState"):
            return
        jobs = self.children(ns, name)
        policy = js["spec"].get("successPolicy") or {"operator": "All"}
        targets = set(policy.get("targetReplicatedJobs") or [rj["name"] for rj in js["spec"]["replicatedJobs"]])
        targeted = [j for j in jobs if j["metadata"]["labels"][RJ_NAME] in targets]
        done = [j for j in targeted if _condition(j, "Complete")]
        if any(_condition(j, "Failed") for j in jobs):
            state, reason, message = "Failed", "FailedJobs", "jobset failed due to one or more job failures"
        elif done and (len(done) == len(targeted) if policy["operator"] == "All" else True):
            state, reason, message = "Completed", "AllJobsCompleted", "jobset completed successfully"
        else:
            return
        self.store.update("jobsets", ns, name, lambda o: o.setdefault("status", {}).update(
            terminalState=state, conditions=[{"type": state, "status": "True", "reason": reason, "message": message,
                                              "lastTransitionTime": now()}]))
        for job in jobs:
            if not finished(job):
                self.store.delete("jobs", ns, job["metadata"]["name"], "Foreground")

    # --- the Job controller, for the JobSet's Jobs --------------------------------------------
    def _job_of(self, pod: Obj) -> None:
        ns = pod["metadata"]["namespace"]
        ref = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"), None)
        job = self.store.objects.get(("jobs", ns, ref["name"])) if ref else None
        if job is None or JOBSET_NAME not in (job["metadata"].get("labels") or {}) or finished(job):
            return
        spec, uid = job["spec"], job["metadata"]["uid"]
        pods = [p for p in self.store.find("pods", ns) if _owned_by(p, uid)]
        ready = sum(1 for p in pods if p["status"].get("phase") == "Running" and p["status"].get("containerStatuses")
                    and all(cs.get("ready") for cs in p["status"]["containerStatuses"]))
        if (job.get("status") or {}).get("ready", 0) != ready:
            self.store.patch("jobs", ns, job["metadata"]["name"], {"status": {"ready": ready}})
        failed = [p for p in pods if p["status"].get("phase") == "Failed"]
        succeeded = {p["metadata"]["annotations"].get(COMPLETION_INDEX) for p in pods
                     if p["status"].get("phase") == "Succeeded"}
        if failed and "backoffLimitPerIndex" not in spec and not spec.get("backoffLimit"):
            condition = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                         "message": "Job has reached the specified backoff limit", "lastTransitionTime": now()}
        elif succeeded >= {str(i) for i in range(spec.get("completions") or 1)}:
            condition = {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                         "message": "Reached expected number of succeeded pods", "lastTransitionTime": now()}
        else:
            return
        self.store.patch("jobs", ns, job["metadata"]["name"], {"status": {"conditions": [condition]}})
