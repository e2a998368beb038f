"""The cluster's side in tests: what the StatefulSet and Job controllers, the scheduler and the
kubelet would do, as explicit steps on the emulator (jobs/tests/k8s_emulator.py)."""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import Any

import kmock

from jobs.backends.kubernetes.manifests import COMPLETION_INDEX, CONTAINER
from jobs.backends.kubernetes.observe import INDEX_FAILURES

from .k8s_emulator import EmulatedCluster, now
from .k8s_jobset import JOBSET_NAME, JobSetController
from .k8s_rbac import Authorizer

Obj = dict[str, Any]


def _container(state: Obj, *, ready: bool = False, restarts: int = 0, last: Obj | None = None) -> Obj:
    return {"name": CONTAINER, "state": state, "lastState": last or {}, "ready": ready, "restartCount": restarts,
            "image": "img", "imageID": ""}


class Cluster(EmulatedCluster):
    def __init__(self, rbac: Authorizer | None = None) -> None:
        super().__init__(rbac)
        self.store.controllers.append(JobSetController(self.store))

    # --- controllers ------------------------------------------------------------------------
    def _pod(self, owner: Obj, name: str, labels: dict, annotations: dict, extra_spec: dict) -> str:
        tpl = owner["spec"]["template"]
        md = owner["metadata"]
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {**(tpl["metadata"].get("labels") or {}), **labels},
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                              "name": md["name"], "uid": md["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {**copy.deepcopy(tpl["spec"]), **extra_spec},
            "status": {"phase": "Pending", "conditions": []},
        }
        return self.store.create("pods", md["namespace"], body)["metadata"]["name"]

    def run_statefulset(self, ns: str, name: str) -> list[str]:
        sset = self.store.get("statefulsets", ns, name)
        return [self._pod(sset, f"{name}-{i}", {"apps.kubernetes.io/pod-index": str(i)}, {},
                          {"hostname": f"{name}-{i}", "subdomain": sset["spec"]["serviceName"]})
                for i in range(sset["spec"]["replicas"])]

    def statefulset_replaces(self, ns: str, pod: str) -> str:
        """The StatefulSet controller with a Failed pod: deletes it and makes it again, same name."""
        obj = self.store.get("pods", ns, pod)
        owner = obj["metadata"]["ownerReferences"][0]["name"]
        self.store.delete("pods", ns, pod)
        sset, index = self.store.get("statefulsets", ns, owner), pod.rsplit("-", 1)[1]
        return self._pod(sset, pod, {"apps.kubernetes.io/pod-index": index}, {},
                         {"hostname": pod, "subdomain": sset["spec"]["serviceName"]})

    def run_job(self, ns: str, name: str, indexes: list[int] | None = None) -> list[str]:
        job = self.store.get("jobs", ns, name)
        out = []
        for i in indexes if indexes is not None else range(job["spec"].get("completions") or 1):
            idx = {COMPLETION_INDEX: str(i)}
            out.append(self._pod(job, f"{name}-{i}-{uuid.uuid4().hex[:5]}", {**idx, "job-name": name}, idx,
                                 {"hostname": f"{name}-{i}"}))
        return out

    def run_jobset(self, ns: str, name: str) -> list[str]:
        """Every pod of a JobSet's Jobs that have none yet (refused while suspended: nothing runs
        before admission)."""
        out = []
        for job in sorted(self.store.find("jobs", ns, f"{JOBSET_NAME}={name}"), key=lambda j: j["metadata"]["name"]):
            if job["spec"].get("suspend"):
                raise AssertionError(f"Job {job['metadata']['name']} is suspended: its pods are not made")
            if not self.store.find("pods", ns, f"job-name={job['metadata']['name']}"):
                out += self.run_job(ns, job["metadata"]["name"])
        return out

    def start_jobset(self, ns: str, name: str) -> list[str]:
        """Run the JobSet's pods and make them ready, Job after Job as its dependsOn lets the
        controller make them (the pservers', then the trainers')."""
        out: list[str] = []
        while new := self.run_jobset(ns, name):
            for pod in new:
                self.pod_running(ns, pod)
            out += new
        return out

    def pod_named(self, ns: str, prefix: str) -> str:
        """The newest pod whose name starts with `prefix` (Job pods get a random suffix)."""
        pods = [p for p in self.store.find("pods", ns) if p["metadata"]["name"].startswith(prefix)]
        return max(pods, key=lambda p: int(p["metadata"]["resourceVersion"]))["metadata"]["name"]

    def statefulset_ready(self, ns: str, name: str, ready: int) -> None:
        self.store.patch("statefulsets", ns, name, {"status": {"replicas": ready, "readyReplicas": ready}})

    def job_condition(self, ns: str, name: str, kind: str, reason: str, message: str) -> None:
        self.store.patch("jobs", ns, name, {"status": {"conditions": [
            {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now()}]}})

    # --- scheduler and kubelet --------------------------------------------------------------
    def _status(self, ns: str, pod: str, status: Obj, node: str | None = "node-1") -> None:
        def change(obj: Obj) -> None:
            obj["status"] = status
            if node:
                obj["spec"]["nodeName"] = node
        self.store.update("pods", ns, pod, change)

    def pod_unschedulable(self, ns: str, pod: str, message: str) -> None:
        self._status(ns, pod, {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}, node=None)

    def pod_waiting(self, ns: str, pod: str, reason: str, message: str = "") -> None:
        self._status(ns, pod, {"phase": "Pending", "containerStatuses": [
            _container({"waiting": {"reason": reason, "message": message}})]})

    def pod_running(self, ns: str, pod: str, *, ready: bool = True, restarts: int = 0) -> None:
        self._status(ns, pod, {"phase": "Running", "startTime": now(), "containerStatuses": [
            _container({"running": {"startedAt": now()}}, ready=ready, restarts=restarts)]})

    def pod_succeeded(self, ns: str, pod: str) -> None:
        self._status(ns, pod, {"phase": "Succeeded", "containerStatuses": [
            _container({"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now()}})]})

    def pod_failed(self, ns: str, pod: str, exit_code: int = 1, reason: str = "Error") -> None:
        self._status(ns, pod, {"phase": "Failed", "containerStatuses": [
            _container({"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": now()}})]})

    def init_failed(self, ns: str, pod: str, container: str, exit_code: int = 1) -> None:
        """An init container failed: the pod fails and its main containers never start."""
        self._status(ns, pod, {"phase": "Failed", "initContainerStatuses": [{
            "name": container, "state": {"terminated": {"exitCode": exit_code, "reason": "Error", "finishedAt": now()}},
            "lastState": {}, "ready": False, "restartCount": 0, "image": "img", "imageID": ""}],
            "containerStatuses": [{**_container({"waiting": {"reason": "PodInitializing"}}), "name": "push"}]})

    def pod_crashloop(self, ns: str, pod: str, exit_code: int = 2, restarts: int = 3) -> None:
        self._status(ns, pod, {"phase": "Running", "containerStatuses": [_container(
            {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
            restarts=restarts, last={"terminated": {"exitCode": exit_code, "reason": "Error", "finishedAt": now()}})]})

    def pod_evicted(self, ns: str, pod: str, *, node_pressure: bool = False) -> None:
        """What the kubelet's eviction manager leaves (pkg/kubelet/eviction/eviction_manager.go,
        evictPod): phase Failed, reason Evicted, its message, the containers killed. Over the pod's
        own ephemeral-storage limit (localStorageEviction, only for a pod that has one): the
        limit in the message and no condition. For node pressure (DiskPressure): the condition
        DisruptionTarget (reason TerminationByKubelet) as well."""
        spec = self.store.get("pods", ns, pod)["spec"]
        conditions: list[Obj] = [{"type": t, "status": "False", "reason": "PodFailed"} for t in ("Ready",
                                                                                                 "ContainersReady")]
        if node_pressure:
            message = ("The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi. "
                       f"Container {CONTAINER} was using 4Gi, request is 10Gi, has larger consumption of "
                       "ephemeral-storage. ")
            conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                               "message": message, "lastTransitionTime": now()})
        else:
            limit = _pod_disk_limit(spec)
            message = f"Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
        self._status(ns, pod, {"phase": "Failed", "reason": "Evicted", "message": message, "conditions": conditions,
                               "containerStatuses": [_container({"terminated": {
                                   "exitCode": 137, "reason": "Error", "finishedAt": now()}})]})

    def warning(self, ns: str, kind: str, name: str, reason: str, message: str) -> None:
        self.store.create("events", ns, {
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:8]}", "namespace": ns}, "type": "Warning",
            "reason": reason, "message": message, "involvedObject": {"kind": kind, "name": name, "namespace": ns},
            "lastTimestamp": now()})

    def log(self, ns: str, pod: str, *lines: str, when: datetime | None = None) -> None:
        entries = self.store.logs.setdefault((ns, pod), [])
        for line in lines:
            entries.append((when or datetime.now(UTC), line))
        self.store._notify()

    def namespaces(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.store.find("namespaces")]

    def objects_in(self, ns: str) -> list[tuple[str, str]]:
        """(plural, name) of every object left in a namespace, except the per-user setup (the
        quota, the namespace's NetworkPolicies, Secrets copied for storage: no job label) and events."""
        with self.store.lock:
            return sorted((p, name) for (p, n, name), o in self.store.objects.items()
                          if n == ns and p not in ("events", "resourcequotas") and not (
                              p in ("secrets", "networkpolicies")
                              and "paddlecloud/job" not in (o["metadata"].get("labels") or {})))

    # --- the Job controller's per-index retries (backoffLimitPerIndex, podFailurePolicy) --------
    def trainer_failed(self, ns: str, pod: str, exit_code: int = 1, reason: str = "Error") -> str | None:
        """The pod fails; then what the Job controller does by the Job's spec: the first rule of its
        podFailurePolicy the pod matches (Ignore: a new pod, the failure not counted; FailIndex: the
        index fails for good), else a new pod for the index while its failures are within
        backoffLimitPerIndex (annotated with the count), else the index fails for good and, past
        maxFailedIndexes, the Job. Returns the new pod's name, if one was made."""
        self.pod_failed(ns, pod, exit_code=exit_code, reason=reason)
        return self._job_controller(ns, pod)

    def trainer_evicted(self, ns: str, pod: str, *, node_pressure: bool = False) -> str | None:
        """The kubelet evicts the pod (pod_evicted); then the Job controller, as for trainer_failed."""
        self.pod_evicted(ns, pod, node_pressure=node_pressure)
        return self._job_controller(ns, pod)

    def _job_controller(self, ns: str, pod: str) -> str | None:
        obj = self.store.get("pods", ns, pod)
        job_name, index = obj["metadata"]["labels"]["job-name"], int(obj["metadata"]["annotations"][COMPLETION_INDEX])
        job = self.store.get("jobs", ns, job_name)
        spec = job["spec"]
        action = _policy_action(spec, obj)
        if action == "Ignore":  # not counted: a new pod for the index
            return self.run_job(ns, job_name, [index])[0]
        failures = sum(1 for p in self.store.find("pods", ns, f"job-name={job_name}")
                       if p["metadata"]["annotations"].get(COMPLETION_INDEX) == str(index)
                       and p["status"]["phase"] == "Failed" and _policy_action(spec, p) != "Ignore")
        if action != "FailIndex" and failures <= (spec.get("backoffLimitPerIndex") or 0):
            new = self.run_job(ns, job_name, [index])[0]
            self.store.patch("pods", ns, new, {"metadata": {"annotations": {INDEX_FAILURES: str(failures)}}})
            return new
        failed = sorted({*_indexes((job.get("status") or {}).get("failedIndexes") or ""), index})
        status: Obj = {"failedIndexes": ",".join(map(str, failed))}
        if len(failed) > (spec.get("maxFailedIndexes") or 0):
            status["conditions"] = [{"type": "Failed", "status": "True", "reason": "MaxFailedIndexesExceeded",
                                     "message": "Job has exceeded the specified maximal number of failed indexes",
                                     "lastTransitionTime": now()}]
        self.store.patch("jobs", ns, job_name, {"status": status})
        return None

    # --- gang schedulers ------------------------------------------------------------------
    def podgroup_status(self, ns: str, name: str, phase: str, unschedulable: str = "") -> None:
        """Volcano's scheduler on a PodGroup: its phase, and why it cannot place the gang."""
        conditions = [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                       "message": unschedulable, "lastTransitionTime": now()}] if unschedulable else []
        if phase == "Running":
            conditions.append({"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be "
                               "scheduled", "lastTransitionTime": now()})
        self.store.patch("podgroups", ns, name, {"status": {"phase": phase, "conditions": conditions}})

    def kueue_workload(self, ns: str, job_name: str, *, admitted: bool, message: str = "",
                       plural: str = "jobsets") -> None:
        """Kueue's controller: the Workload of a queued Job (or JobSet: one Workload, a PodSet per
        replicated job), pending with a message or admitted (the Job or JobSet then unsuspended)."""
        job = self.store.get(plural, ns, job_name)
        name = f"{job['kind'].lower()}-{job_name}-1a2b3"
        conditions = [{"type": "QuotaReserved", "status": "True" if admitted else "False",
                       "reason": "QuotaReserved" if admitted else "Pending", "message": message or "ok"}]
        if admitted:
            conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted",
                               "lastTransitionTime": now()})
        try:
            self.store.patch("workloads", ns, name, {"status": {"conditions": conditions}})
        except kmock.KubernetesError:
            md = job["metadata"]
            self.store.create("workloads", ns, {
                "metadata": {"name": name, "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                                                "name": md["name"], "uid": md["uid"],
                                                                "controller": True}]},
                "spec": {"queueName": md["labels"]["kueue.x-k8s.io/queue-name"], "podSets": _podsets(job)},
                "status": {"conditions": conditions}})
        if admitted:
            self.store.patch(plural, ns, job_name, {"spec": {"suspend": False}})


def _policy_action(job_spec: Obj, pod: Obj) -> str | None:
    """The action of the first podFailurePolicy rule a failed pod matches (None: none, counted)."""
    st = pod.get("status") or {}
    codes = {cs["name"]: cs["state"]["terminated"]["exitCode"] for cs in st.get("containerStatuses") or []
             if "terminated" in (cs.get("state") or {})}
    conditions = {(c["type"], c["status"]) for c in st.get("conditions") or []}
    for rule in (job_spec.get("podFailurePolicy") or {}).get("rules", []):
        on_codes = rule.get("onExitCodes")
        if on_codes:
            found = [c for n, c in codes.items() if on_codes.get("containerName") in (None, n)]
            if any((c in on_codes["values"]) == (on_codes["operator"] == "In") for c in found):
                return str(rule["action"])
        elif any((p["type"], p.get("status", "True")) in conditions for p in rule.get("onPodConditions") or []):
            return str(rule["action"])
    return None


def _pod_disk_limit(spec: Obj) -> str:
    """The pod's ephemeral-storage limit as the kubelet prints it: its containers' together, or an
    init container's if larger (PodLimits); the kubelet evicts no pod without one."""
    from quotas.units import quantity

    def limit(c: Obj) -> int:
        value = ((c.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
        assert value, f"container {c['name']} has no ephemeral-storage limit: the kubelet would not evict it for one"
        return int(quantity(value))

    total = max([sum(limit(c) for c in spec["containers"])] + [limit(c) for c in spec.get("initContainers") or []])
    for suffix, shift in (("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if total % (1 << shift) == 0:
            return f"{total >> shift}{suffix}"
    return str(total)


def _podsets(obj: Obj) -> list[Obj]:
    if obj["kind"] == "JobSet":
        return [{"name": rj["name"], "count": rj["template"]["spec"]["parallelism"] * rj.get("replicas", 1)}
                for rj in obj["spec"]["replicatedJobs"]]
    return [{"name": "main", "count": obj["spec"].get("parallelism") or 1}]


def _indexes(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            out += range(int(first), int(last or first) + 1)
    return out
