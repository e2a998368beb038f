"""Pod to replica state, with the reason a person can act on (pure mapping, no cluster)."""

import pytest

from jobs.backends.kubernetes.manifests import COMPLETION_INDEX, LABEL_JOB_ID, LABEL_ROLE
from jobs.backends.kubernetes.status import (
    Warning,  # noqa: A004 - Kubernetes' event type
    pod_status,
    replica_key,
    workload_failure,
)

pytestmark = pytest.mark.unit


def pod(phase="Pending", *, main=None, init=None, conditions=(), deleting=False, node="n1", reason=None,
        message=None):
    st = {"phase": phase, "conditions": list(conditions)}
    if main is not None:
        st["containerStatuses"] = [{"name": "paddle", "restartCount": 0, "ready": False, **main}]
    if init is not None:
        st["initContainerStatuses"] = [{"name": "package", **init}]
    if reason:
        st["reason"], st["message"] = reason, message
    md = {"name": "p", "labels": {LABEL_JOB_ID: "7", LABEL_ROLE: "trainer"}}
    if deleting:
        md["deletionTimestamp"] = deleting if isinstance(deleting, str) else "2026-01-01T00:00:00Z"
    return {"metadata": md, "spec": {"nodeName": node} if node else {}, "status": st}


def term(code, reason="Error"):
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": "2026-01-01T00:00:09Z"}}


CASES = [
    (pod("Succeeded", main={"state": term(0, "Completed")}), "trainer", ("Succeeded", "Completed", 0)),
    (pod("Failed", main={"state": term(137, "OOMKilled")}), "trainer", ("Failed", "OOMKilled", 137)),
    (pod("Failed", main={"state": term(3)}), "trainer", ("Failed", "Error", 3)),
    (pod("Failed", reason="Evicted", message="low on memory"), "trainer", ("Failed", "Evicted", None)),
    (pod("Failed", init={"state": term(1)}), "trainer", ("Failed", "InitFailed", 1)),
    (pod("Pending", init={"state": term(1)}), "pserver", ("Failed", "InitFailed", 1)),
    (pod("Running", main={"state": {"running": {}}}, deleting=True), "trainer", ("Terminated", "Terminated", None)),
    (pod("Running", main={"state": {"running": {}}},
         conditions=[{"type": "DisruptionTarget", "status": "True", "message": "node drained"}]),
     "trainer", ("Running", "Disrupted", None)),
    (pod("Unknown"), "trainer", ("Running", "NodeLost", None)),
    (pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                      "message": "0/2 nodes: Insufficient cpu"}], node=None), "trainer",
     ("Pending", "Unschedulable", None)),
    (pod(main={"state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}), "trainer",
     ("Pending", "ErrImagePull", None)),
    (pod(main={"state": {"waiting": {"reason": "InvalidImageName", "message": "bad"}}}), "trainer",
     ("Failed", "InvalidImageName", None)),
    (pod(init={"state": {"waiting": {"reason": "ImagePullBackOff"}}}), "trainer",
     ("Pending", "ImagePullBackOff", None)),
    (pod(main={"state": {"waiting": {"reason": "CreateContainerConfigError", "message": "secret x not found"}}}),
     "trainer", ("Pending", "CreateContainerConfigError", None)),
    (pod("Running", main={"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "restartCount": 1,
                          "lastState": term(1)}), "pserver", ("Failed", "Error", 1)),
    (pod("Running", main={"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 4,
                          "lastState": term(2)}), "trainer", ("Failed", "CrashLoopBackOff", 2)),
    (pod("Running", main={"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}), "trainer",
     ("Running", "Running", None)),
    (pod(main={"state": {"waiting": {"reason": "ContainerCreating"}}}), "trainer",
     ("Pending", "ContainerCreating", None)),
    (pod(node=None), "trainer", ("Pending", "Scheduling", None)),
    # Deleted after failing by itself (the cluster deletes a failed job's pods): still its failure.
    (pod("Failed", main={"state": term(3)}, deleting="2026-01-01T00:00:10Z"), "trainer", ("Failed", "Error", 3)),
    (pod("Failed", main={"state": term(137, "OOMKilled")}, deleting="2026-01-01T00:00:09Z"), "trainer",
     ("Failed", "OOMKilled", 137)),
    (pod("Failed", reason="Evicted", message="low on memory", deleting=True), "trainer", ("Failed", "Evicted", None)),
    # Stopped by the deletion: the kubelet's SIGTERM, after (or in the same second as) the mark.
    (pod("Failed", main={"state": term(143)}, deleting=True), "trainer", ("Terminated", "Terminated", 143)),
    (pod("Failed", main={"state": term(143)}, deleting="2026-01-01T00:00:09Z"), "trainer",
     ("Terminated", "Terminated", 143)),
    # Never started: deleted while unschedulable or pulling its image.
    (pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}], node=None,
         deleting=True), "trainer", ("Terminated", "NotStarted", None)),
    (pod("Failed", main={"state": {"waiting": {"reason": "ImagePullBackOff"}}}, deleting=True), "trainer",
     ("Terminated", "NotStarted", None)),
]


@pytest.mark.parametrize("obj, role, want", CASES)
def test_pod_states_and_reasons(obj, role, want):
    s = pod_status(obj, role)
    assert (s.state, s.reason, s.exit_code) == want
    assert s.pod == "p"


def test_messages_say_what_happened():
    assert "0/2 nodes: Insufficient cpu" in pod_status(CASES[9][0], "trainer").message
    assert "memory limit" in pod_status(CASES[1][0], "trainer").message
    assert "restarted 4 times" in pod_status(CASES[15][0], "trainer").message
    assert pod_status(CASES[6][0], "trainer").message == "stopped by PaddleCloud"


def test_a_failed_mount_shows_only_from_its_warning_event():
    stuck = pod(main={"state": {"waiting": {"reason": "ContainerCreating"}}})
    s = pod_status(stuck, "trainer", warning=Warning("FailedMount", "MountVolume.SetUp failed: timeout"))
    assert (s.state, s.reason, s.message) == ("Pending", "FailedMount", "MountVolume.SetUp failed: timeout")


@pytest.mark.parametrize("labels, annotations, name, want", [
    ({"paddlecloud/index": "3"}, {}, "x", 3),
    ({}, {COMPLETION_INDEX: "2"}, "fit-trainer-2-abcde", 2),
    ({}, {}, "fit-pserver-4", 4),
])
def test_replica_keys_from_every_kind_of_pod(labels, annotations, name, want):
    obj = {"metadata": {"name": name, "labels": {LABEL_JOB_ID: "9", LABEL_ROLE: "trainer", **labels},
                        "annotations": annotations}}
    assert replica_key(obj) == (9, "trainer", want)
    assert replica_key({"metadata": {"name": name, "labels": labels}}) is None


def test_a_failed_trainer_job_condition():
    job = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "message": "Job has reached the specified backoff limit"}]}}
    assert workload_failure(job) == ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert workload_failure({"status": {}}) is None


@pytest.mark.parametrize("obj, blocked, queued", [
    (CASES[9][0], True, False),  # Unschedulable: the scheduler's message is the user's to act on
    (CASES[10][0], True, False),  # ErrImagePull
    (CASES[13][0], True, False),  # CreateContainerConfigError
    (pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}], node=None),
     False, True),  # held by a scheduling gate (Kueue's): waiting its turn
    (CASES[17][0], False, False),  # ContainerCreating: under way
    (CASES[18][0], False, False),  # Scheduling: under way
], ids=["unschedulable", "image-pull", "config-error", "gated", "creating", "scheduling"])
def test_a_pending_pod_says_whether_it_is_blocked_or_queued_and_since_when(obj, blocked, queued):
    obj = {**obj, "metadata": {**obj["metadata"], "creationTimestamp": "2026-01-01T00:00:05Z"}}
    s = pod_status(obj, "trainer")
    assert (s.state, s.blocked, s.queued) == ("Pending", blocked, queued)
    assert s.pending_since is not None and s.pending_since.isoformat() == "2026-01-01T00:00:05+00:00"


def test_a_crash_looping_container_reports_how_often_it_was_restarted():
    assert pod_status(CASES[15][0], "trainer").crash_restarts == 4
    assert pod_status(CASES[14][0], "pserver").crash_restarts == 1


# What the kubelet's eviction manager writes (pkg/kubelet/eviction/eviction_manager.go, helpers.go):
# over the pod's own ephemeral-storage limit (localStorageEviction) no condition; on node pressure
# the DisruptionTarget condition TerminationByKubelet, which the trainer Job's podFailurePolicy ignores.
OWN_LIMIT = "Pod ephemeral local storage usage exceeds the total limit of containers 10Gi. "
CONTAINER_LIMIT = 'Container paddle exceeded its local ephemeral storage limit "10Gi". '
NODE_LOW = ("The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi. "
            "Container paddle was using 4Gi, request is 10Gi, has larger consumption of ephemeral-storage. ")


@pytest.mark.parametrize("obj, role, want", [
    (pod("Failed", main={"state": term(137)}, reason="Evicted", message=OWN_LIMIT), "trainer",
     ("Failed", "DiskLimit", 137)),
    (pod("Failed", main={"state": term(137)}, reason="Evicted", message=CONTAINER_LIMIT), "pserver",
     ("Failed", "DiskLimit", 137)),
    # Its StatefulSet (or the end of the job) deletes it: still its own failure.
    (pod("Failed", main={"state": term(137)}, reason="Evicted", message=OWN_LIMIT, deleting=True), "pserver",
     ("Failed", "DiskLimit", 137)),
    # Killed but not yet Failed (the kubelet sets the phase once the containers stopped).
    (pod("Running", main={"state": {"running": {}}}, reason="Evicted", message=OWN_LIMIT), "trainer",
     ("Failed", "DiskLimit", None)),
    (pod("Failed", main={"state": term(137)}, reason="Evicted", message=NODE_LOW, conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": NODE_LOW}]),
     "trainer", ("Running", "Disrupted", None)),
    (pod("Failed", main={"state": term(137)}, reason="Evicted", message=NODE_LOW), "pserver",
     ("Failed", "Error", 137)),
], ids=["pod-limit", "container-limit", "deleted", "not-yet-failed", "node-pressure", "node-pressure-pserver"])
def test_an_eviction_for_the_pods_own_disk_limit_is_disk_limit_not_a_disruption(obj, role, want):
    s = pod_status(obj, role)
    assert (s.state, s.reason, s.exit_code) == want
    if s.reason == "DiskLimit":
        assert "disk_limit" in s.message and obj["status"]["message"].strip() in s.message
