# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""The watcher's Kubernetes part against the emulated cluster, the tests playing the cluster:
pods appearing and changing phase, image pull failures, unschedulable pods, crash loops, failed
mounts, watch streams dropping and 410 Gone."""

import pytest

from jobs.backends.kubernetes import manifests
from jobs.live import logstore
from jobs.models import JobState, ReplicaState

from .k8s_fixtures import cluster, k8s_dc, launch, ns_of, part, submit  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def replicas(job):
    return {r.name: r for r in job.replicas.all()}


def start_pservers(cluster, part, job, ns):
    pods = cluster.run_statefulset(ns, manifests.pserver_name(job))
    for pod in pods:
        cluster.pod_running(ns, pod)
    cluster.statefulset_ready(ns, manifests.pserver_name(job), job.pservers)
    part.until(lambda: cluster.store.find("jobs", ns), what="the trainer Job")
    return pods


def test_ps_job_runs_in_order_and_succeeds_leaving_nothing(alice, cluster, part):
    job = submit(alice, "fit")
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    part.tick()
    assert not cluster.store.find("jobs", ns), "trainers must wait for the pservers"
    r = replicas(part.job(job))
    assert r["trainer-0"].reason == "WaitingForPservers"
    ps = cluster.run_statefulset(ns, "fit-pserver")
    cluster.pod_running(ns, ps[0])
    cluster.pod_running(ns, ps[1], ready=False)
    cluster.statefulset_ready(ns, "fit-pserver", 1)
    part.until(lambda: replicas(job)["pserver-1"].state == ReplicaState.RUNNING, what="pservers running")
    assert not cluster.store.find("jobs", ns), "one pserver is not ready yet"
    cluster.statefulset_ready(ns, "fit-pserver", 2)
    part.until(lambda: cluster.store.find("jobs", ns), what="the trainer Job")
    trainers = cluster.run_job(ns, "fit-trainer")
    cluster.log(ns, ps[0], "pserver listening")
    for pod in trainers:
        cluster.pod_running(ns, pod)
        cluster.log(ns, pod, f"{pod} step 1", "loss 0.5")
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
    for pod in trainers:
        cluster.log(ns, pod, "done")
        cluster.pod_succeeded(ns, pod)
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded")
    part.until(lambda: cluster.objects_in(ns) == [], what="everything deleted")
    t0 = job.replicas.get(role="trainer", index=0)
    assert logstore.read(t0).text == f"{trainers[0]} step 1\nloss 0.5\ndone\n"
    assert "pserver listening" in logstore.read(job.replicas.get(role="pserver", index=0)).text
    part.until(lambda: replicas(job)["pserver-0"].state == ReplicaState.TERMINATED, what="pservers terminated")
    assert replicas(job)["trainer-1"].state == ReplicaState.SUCCEEDED


def started(cluster, part, alice, name="fit", **fields):
    """A launched job whose watches are in sync; pservers running and ready, trainer pods made."""
    job = submit(alice, name, **fields)
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    if job.pservers:
        start_pservers(cluster, part, job, ns)
    trainers = cluster.run_job(ns, manifests.trainer_name(job))
    return job, ns, trainers


def test_a_job_named_with_dots_and_capitals_runs_under_its_k8s_name(alice, cluster, part):
    job, ns, trainers = started(cluster, part, alice, "My.Job", mode="collective", pservers=0, trainers=1)
    objects = cluster.objects_in(ns)
    assert ("configmaps", job.k8s_name) in objects and ("jobs", f"{job.k8s_name}-trainer") in objects
    assert all(name.startswith(job.k8s_name) for _, name in objects), objects  # the emulator checks them too
    cluster.pod_running(ns, trainers[0])
    cluster.log(ns, trainers[0], "hello")
    cluster.pod_succeeded(ns, trainers[0])
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded")
    assert part.job(job).name == "My.Job"
    assert logstore.read(job.replicas.get(role="trainer", index=0)).text == "hello\n"


def test_image_pull_backoff_is_the_jobs_reason_then_fails_it_at_the_pending_timeout(alice, cluster, part, k8s_dc):
    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=2)
    cluster.pod_running(ns, trainers[0])
    cluster.pod_waiting(ns, trainers[1], "ImagePullBackOff", 'Back-off pulling image "paddle:nope"')
    part.until(lambda: part.job(job).reason == "ImagePullBackOff", what="the reason on the job")
    assert "trainer-1" in job.message and "paddle:nope" in job.message and job.state == JobState.STARTING
    r = replicas(job)["trainer-1"]
    assert (r.state, r.reason) == (ReplicaState.PENDING, "ImagePullBackOff")
    k8s_dc.config = {**k8s_dc.config, "pending_timeout": 1}
    k8s_dc.save()
    part.part.next_refresh = 0
    part.until(lambda: part.job(job).state == JobState.FAILED, what="the pending timeout")
    assert job.reason == "ImagePullBackOff" and "did not start within 1 s" in job.message
    part.until(lambda: cluster.objects_in(ns) == [], what="everything deleted")


def test_unschedulable_shows_the_schedulers_message(alice, cluster, part):
    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=1)
    msg = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    cluster.pod_unschedulable(ns, trainers[0], msg)
    part.until(lambda: part.job(job).reason == "Unschedulable", what="Unschedulable")
    assert job.message == f"trainer-0: {msg}"
    cluster.pod_running(ns, trainers[0])
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running once scheduled")


def test_failed_mount_from_a_warning_event(alice, cluster, part):
    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=1)
    cluster.pod_waiting(ns, trainers[0], "ContainerCreating")
    cluster.warning(ns, "Pod", trainers[0], "FailedMount", "MountVolume.SetUp failed for volume \"pfs\": no route")
    part.until(lambda: part.job(job).reason == "FailedMount", what="FailedMount")
    assert "no route" in job.message


def test_quota_refusal_on_the_trainer_job_is_shown(alice, cluster, part):
    job, ns, _ = started(cluster, part, alice, mode="collective", pservers=0, trainers=1)
    cluster.store.delete("pods", ns, cluster.pod_named(ns, "fit-trainer-0"))
    cluster.warning(ns, "Job", "fit-trainer", "FailedCreate", "pods is forbidden: exceeded quota: paddlecloud-quota")
    part.until(lambda: part.job(job).reason == "FailedCreate", what="FailedCreate")
    assert "exceeded quota" in job.message


def test_crash_looping_pserver_fails_the_job_with_its_log_tail(alice, cluster, part):
    job = submit(alice, "fit")
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    ps = cluster.run_statefulset(ns, "fit-pserver")
    cluster.pod_running(ns, ps[0])
    cluster.pod_running(ns, ps[1])
    cluster.log(ns, ps[1], "Traceback (most recent call last):", "ImportError: no module named paddle")
    # The message quotes what the log follower has stored; a crash-looping pod stays Running, so
    # the pass does not wait for its follower as it does for a finished pod's (logs.drain).
    part.until(lambda: "ImportError" in logstore.tail(replicas(job)["pserver-1"], 5).text, what="the log followed")
    cluster.pod_crashloop(ns, ps[1], exit_code=1)
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    assert job.reason == "ReplicaFailed" and "pserver-1" in job.message
    assert "ImportError: no module named paddle" in job.message
    r = replicas(job)["pserver-1"]
    assert (r.reason, r.exit_code, r.restarts) == ("CrashLoopBackOff", 1, 3)


def test_oom_killed_trainer(alice, cluster, part):
    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=2, max_restarts=0)
    for pod in trainers:
        cluster.pod_running(ns, pod)
    cluster.pod_failed(ns, trainers[1], exit_code=137, reason="OOMKilled")
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    r = replicas(job)["trainer-1"]
    assert (r.state, r.reason, r.exit_code) == (ReplicaState.FAILED, "OOMKilled", 137)
    assert "memory limit" in job.message


def test_watches_resume_after_drops_and_relist_after_410_gone(alice, cluster, part):
    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=2)
    watches = part.watcher().threads
    # The state is ready once pods, Jobs and StatefulSets are listed; the others may list later.
    part.until(lambda: all(t.relists for t in watches), what="every watch's first list")
    lists = sum(t.relists for t in watches)
    cluster.drop_streams()
    cluster.pod_running(ns, trainers[0])
    part.until(lambda: replicas(job)["trainer-0"].state == ReplicaState.RUNNING, what="change after a drop")
    assert sum(t.relists for t in watches) == lists, "a dropped stream resumes from its resourceVersion"
    cluster.store.expire_watches()
    cluster.pod_running(ns, trainers[1])
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="change after 410 Gone")
    part.until(lambda: sum(t.relists for t in watches) >= lists + len(watches), what="every watch relisted")
    # A pod deleted while the watch was down is noticed by the relist.
    with cluster.store.lock:  # the watches are cut and expired, then things change unseen
        cluster.store.expire_watches()
        cluster.pod_succeeded(ns, trainers[0])
        cluster.pod_succeeded(ns, trainers[1])
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded after a relist")


def test_a_failed_trainer_job_fails_the_job_even_when_its_pods_are_gone(alice, cluster, part):
    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=2)
    for pod in trainers:
        cluster.pod_running(ns, pod)
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
    for pod in trainers:  # e.g. deleted by someone: the Job counts them failed and gives up
        cluster.store.delete("pods", ns, pod)
    cluster.job_condition(ns, "fit-trainer", "Failed", "BackoffLimitExceeded", "Job has reached the backoff limit")
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    assert "backoff limit" in job.message and replicas(job)["trainer-0"].reason == "BackoffLimitExceeded"


def test_pservers_that_never_get_ready_fail_the_job_at_the_pending_timeout(alice, cluster, part, k8s_dc):
    job = submit(alice, "fit")
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    for pod in cluster.run_statefulset(ns, "fit-pserver"):
        cluster.pod_running(ns, pod, ready=False)  # listening on the wrong port: never ready
    part.until(lambda: replicas(part.job(job))["trainer-0"].reason == "WaitingForPservers", what="trainers waiting")
    k8s_dc.config = {**k8s_dc.config, "pending_timeout": 1}  # now, on a machine however busy
    k8s_dc.save()
    part.until(lambda: part.job(job).state == JobState.FAILED, timeout=15, what="the pending timeout")
    assert job.reason == "WaitingForPservers" and "0 ready" in job.message


def test_pods_get_their_index_label_and_orphans_are_swept(alice, cluster, part):
    from jobs.backends.kubernetes import manifests

    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=2)
    cluster.pod_running(ns, trainers[1])
    part.until(lambda: all(manifests.LABEL_INDEX in cluster.store.get("pods", ns, p)["metadata"]["labels"]
                           for p in trainers), what="index labels")
    assert cluster.store.get("pods", ns, trainers[1])["metadata"]["labels"][manifests.LABEL_INDEX] == "1"
    job.delete()  # the row is gone (say, removed by hand) while its objects still run
    part.part.next_sweep = 0
    part.until(lambda: cluster.objects_in(ns) == [], what="the orphans swept")


def test_jobs_go_running_while_the_api_server_answers_no_pod_label(alice, cluster, part):
    """The index labels go out from a thread of their own: a hundred jobs starting at once ask
    for four hundred, and an API server that answers none of them holds the watch loop up no more
    than one that answers them all."""
    with cluster.hang("PATCH", r"/api/v1/namespaces/[^/]+/pods/[^/]+$", {}) as asked:
        started_jobs = [started(cluster, part, alice, name=name, mode="collective", pservers=0, trainers=2)
                        for name in ("fit-a", "fit-b")]
        for _, ns, trainers in started_jobs:
            for pod in trainers:
                cluster.pod_running(ns, pod)
        passes = part.passes_in_thread(3)
        # A label asked for by the loop itself waits out the client's read timeout (5 s) and its
        # retries: for four pods, the first pass alone would take far longer.
        assert passes.wait(20), "the watch loop is held up by the pods' labels"
        part.until(lambda: all(part.job(job).state == JobState.RUNNING for job, _, _ in started_jobs),
                   what="both jobs Running")
        part.until(lambda: asked, what="the labels to be asked for")
        assert not any(manifests.LABEL_INDEX in (pod["metadata"].get("labels") or {})
                       for pod in cluster.store.find("pods")), "none answered"


@pytest.mark.parametrize("code, reason", [(3, "Error"), (137, "OOMKilled")])
def test_a_failed_replica_stays_failed_while_the_cluster_deletes_its_pod(alice, cluster, part, code, reason):
    """The job fails, its root is deleted, the garbage collector marks every pod for deletion
    (the Job's tracking finalizer keeps them Terminating), then they go: the replica that
    failed keeps its exit code and reason, the one never scheduled ends NotStarted."""
    cluster.store.slow_deletion = True
    job, ns, trainers = started(cluster, part, alice, mode="collective", pservers=0, trainers=3, max_restarts=0)
    cluster.pod_running(ns, trainers[0])
    cluster.pod_unschedulable(ns, trainers[2], "0/3 nodes are available: 3 Insufficient cpu.")
    cluster.pod_failed(ns, trainers[1], exit_code=code, reason=reason)
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    part.until(lambda: all(cluster.store.get("pods", ns, p)["metadata"].get("deletionTimestamp") for p in trainers),
               what="every pod marked for deletion")
    part.until(lambda: replicas(job)["trainer-0"].state == ReplicaState.TERMINATED, what="trainer-0 stopped")
    part.until(lambda: replicas(job)["trainer-2"].state == ReplicaState.TERMINATED, what="trainer-2 ended")
    cluster.store.finish_deletions()
    part.until(lambda: cluster.objects_in(ns) == [], what="everything deleted")
    for _ in range(3):
        part.tick()
    r = replicas(job)
    assert (r["trainer-1"].state, r["trainer-1"].reason, r["trainer-1"].exit_code) == ("Failed", reason, code)
    assert (r["trainer-0"].state, r["trainer-0"].reason) == ("Terminated", "Terminated")
    assert (r["trainer-2"].state, r["trainer-2"].reason) == ("Terminated", "NotStarted")
    assert list(job.events.filter(replica=r["trainer-1"]).values_list("state", flat=True)) == ["Failed"]
