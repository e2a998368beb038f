# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Restarts and suspend on Kubernetes, over HTTP against the emulator: a failed trainer retried
by its Job (backoffLimitPerIndex, permanent exit codes), a gang restart that recreates the job's
objects for the new attempt, and suspend / resume with spec.suspend."""

import pytest

from jobs.backends.kubernetes import manifests
from jobs.backends.kubernetes.observe import INDEX_FAILURES
from jobs.backends.registry import get_backend
from jobs.models import Job, JobState, Replica, ReplicaState
from jobs.state import attempts

from .k8s_fixtures import cluster, k8s_dc, launch, ns_of, part, started_long_ago, submit  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def replica(job, name: str) -> Replica:
    return next(r for r in job.replicas.all() if r.name == name)


def running(cluster, part, alice, **fields):
    """A launched job with every replica running (pservers ready first), as the watcher saw it."""
    job = submit(alice, "fit", **fields)
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    pods = {}
    if job.pservers:
        for pod in cluster.run_statefulset(ns, manifests.pserver_name(job)):
            cluster.pod_running(ns, pod)
        cluster.statefulset_ready(ns, manifests.pserver_name(job), job.pservers)
        part.until(lambda: cluster.store.find("jobs", ns), what="the trainer Job")
    for i, pod in enumerate(cluster.run_job(ns, manifests.trainer_name(job))):
        cluster.pod_running(ns, pod)
        pods[i] = pod
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
    return job, ns, pods


def new_attempt(job) -> None:
    """What the lifecycle does before restart() or a resumed launch()."""
    attempts.new_attempt(list(job.replicas.all()), from_states=None)


def test_a_failed_trainer_is_retried_by_its_job_until_max_restarts(alice, cluster, part):
    job, ns, pods = running(cluster, part, alice, mode="collective", pservers=0, trainers=2, max_restarts=2)
    pod = pods[1]
    for n in (1, 2):
        pod = cluster.trainer_failed(ns, pod, exit_code=1)
        assert pod, f"failure {n} is within backoffLimitPerIndex: the Job makes a new pod"
        part.until(lambda n=n: replica(job, "trainer-1").restarts == n, what=f"restart {n} recorded")
        r = replica(job, "trainer-1")
        assert (r.state, r.reason) == (ReplicaState.RUNNING, "Restarting") and f"restart {n} of 2" in r.message
        assert part.job(job).state == JobState.RUNNING
        cluster.pod_running(ns, pod)
        part.until(lambda: replica(job, "trainer-1").reason == "Running", what="the new pod running")
    assert cluster.trainer_failed(ns, pod, exit_code=1) is None, "past the limit: the index fails for good"
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    r = replica(job, "trainer-1")
    assert (r.state, r.exit_code, r.restarts) == (ReplicaState.FAILED, 1, 2)
    assert replica(job, "trainer-0").restarts == 0
    # Each retry by the cluster is one Restarting event with the exit code that caused it.
    restarts = list(job.events.filter(reason="Restarting", replica__index=1).values_list("message", flat=True))
    assert len(restarts) == 2 and all("exit code 1" in m for m in restarts), restarts


def test_a_permanent_exit_code_fails_the_trainer_at_once(alice, cluster, part):
    job, ns, pods = running(cluster, part, alice, mode="collective", pservers=0, trainers=2, max_restarts=3,
                            permanent_exit_codes="2, 64")
    trainers = cluster.store.get("jobs", ns, "fit-trainer")["spec"]
    assert trainers["backoffLimitPerIndex"] == 3
    assert cluster.trainer_failed(ns, pods[0], exit_code=64) is None, "FailIndex: no new pod"
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    r = replica(job, "trainer-0")
    assert (r.state, r.exit_code, r.restarts) == (ReplicaState.FAILED, 64, 0), (r.reason, r.message)


def test_a_gang_restart_recreates_the_objects_and_never_takes_old_pods_for_new(alice, cluster, part):
    cluster.store.slow_deletion = True  # the old attempt's pods linger while they are deleted
    job, ns, pods = running(cluster, part, alice, mode="ps", pservers=2, trainers=2, restart_mode="gang")
    backend = get_backend(job.datacenter)
    # Started long ago: the new attempt's wait for the cluster is timed from the restart.
    started_long_ago(job)
    cluster.pod_failed(ns, pods[0], exit_code=3)  # the old attempt's trainer: failed, not yet seen
    backend.stop(job, list(job.replicas.all()))
    new_attempt(job)
    backend.restart(job, list(job.replicas.all()))
    backend.restart(job, list(job.replicas.all()))  # idempotent per attempt
    names = {name for _, name in cluster.objects_in(ns)}
    assert {"fit-pserver-a1"} <= names and not {"fit-pserver", "fit-trainer"} & names
    assert ("services", "fit-trainer-a1") in cluster.objects_in(ns)
    r = replica(job, "pserver-1")
    assert r.host == f"fit-pserver-a1-1.fit-pserver-a1.{ns}.svc", "the new attempt's own DNS names"
    env = cluster.store.get("statefulsets", ns, "fit-pserver-a1")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert any("fit-pserver-a1-0.fit-pserver-a1" in (e.get("value") or "") for e in env)
    for pod in cluster.run_statefulset(ns, "fit-pserver-a1"):
        cluster.pod_running(ns, pod)
    cluster.statefulset_ready(ns, "fit-pserver-a1", 2)
    part.until(lambda: ("jobs", "fit-trainer-a1") in cluster.objects_in(ns), what="the new attempt's trainers")
    part.until(lambda: replica(job, "pserver-0").state == ReplicaState.RUNNING, what="the new pservers running")
    assert part.job(job).state == JobState.RUNNING, job.message
    r = replica(job, "trainer-0")
    assert r.state == ReplicaState.PENDING and r.exit_code is None, "the old attempt's failed pod is not this one's"
    for pod in cluster.run_job(ns, "fit-trainer-a1"):
        cluster.pod_succeeded(ns, pod)
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded")


def test_suspend_uses_spec_suspend_and_resume_starts_the_next_attempt(alice, cluster, part):
    job, ns, pods = running(cluster, part, alice, mode="ps", pservers=2, trainers=2)
    backend = get_backend(job.datacenter)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUSPENDED)
    job.refresh_from_db()
    backend.suspend(job)
    backend.suspend(job)  # idempotent
    assert cluster.store.get("jobs", ns, "fit-trainer")["spec"]["suspend"] is True
    assert cluster.store.get("statefulsets", ns, "fit-pserver")["spec"]["replicas"] == 0
    assert cluster.store.find("pods", ns) == [], "the controllers delete the pods (gracefully)"
    # Resume: queued again, then launched as a new attempt.
    Job.objects.filter(pk=job.pk).update(state=JobState.STARTING)
    job.refresh_from_db()
    new_attempt(job)
    backend.launch(job)
    names = {name for _, name in cluster.objects_in(ns)}
    assert {"fit-pserver-a1", "fit"} <= names and not {"fit-pserver", "fit-trainer"} & names


def test_resume_of_the_same_attempt_unsuspends_its_objects_pservers_first(alice, cluster, part):
    job, ns, pods = running(cluster, part, alice, mode="ps", pservers=2, trainers=2)
    backend = get_backend(job.datacenter)
    backend.suspend(job)
    cluster.statefulset_ready(ns, "fit-pserver", 0)  # the StatefulSet controller: its pods are gone
    Job.objects.filter(pk=job.pk).update(state=JobState.STARTING)
    job.refresh_from_db()
    backend.launch(job)
    assert cluster.store.get("statefulsets", ns, "fit-pserver")["spec"]["replicas"] == 2
    assert cluster.store.get("jobs", ns, "fit-trainer")["spec"]["suspend"] is True, "until the pservers are ready"
    for pod in cluster.run_statefulset(ns, "fit-pserver"):
        cluster.pod_running(ns, pod)
    cluster.statefulset_ready(ns, "fit-pserver", 2)
    part.until(lambda: cluster.store.get("jobs", ns, "fit-trainer")["spec"]["suspend"] is False,
               what="the trainers resumed")


def test_suspend_under_kueue_deletes_the_workloads_and_volcano_gives_up_its_podgroup(alice, cluster, k8s_dc):
    for config in ({"gang_scheduler": "kueue", "kueue_queue": "q"}, {"gang_scheduler": "volcano"}):
        k8s_dc.config = {**k8s_dc.config, "gang_scheduler": "none", "kueue_queue": "", **config}
        k8s_dc.save()
        name = f"fit-{config['gang_scheduler']}"
        job = submit(alice, name, mode="collective", pservers=0, trainers=2)
        launch(job)
        ns = ns_of(job)
        get_backend(job.datacenter).suspend(job)
        left = {n for _, n in cluster.objects_in(ns) if n.startswith(name)}
        if config["gang_scheduler"] == "kueue":
            assert not {(p, n) for p, n in cluster.objects_in(ns) if p in ("jobsets", "jobs")} & {
                ("jobsets", name), ("jobs", f"{name}-trainer-0")}
        else:
            assert cluster.store.get("jobs", ns, f"{name}-trainer")["spec"]["suspend"] is True
            assert f"{name}-gang" not in left


def test_a_crash_looping_pserver_restarts_every_replica_by_itself_and_the_next_attempt_succeeds(
        alice, cluster, part, settings):
    settings.RESTART_BACKOFF_SECONDS = 0.1
    job, ns, pods = running(cluster, part, alice, mode="ps", pservers=2, trainers=2, restart_mode="gang",
                            max_restarts=1)
    pserver_pods = [p["metadata"]["name"] for p in cluster.store.find("pods", ns) if "pserver" in p["metadata"]["name"]]
    cluster.pod_crashloop(ns, sorted(pserver_pods)[1], exit_code=1)
    # The watcher's own passes: every replica is stopped (their workloads deleted, so their pods
    # are not coming back), then after the backoff the next attempt's objects are made.
    part.until(lambda: ("statefulsets", "fit-pserver-a1") in cluster.objects_in(ns), what="the next attempt")
    assert not {("statefulsets", "fit-pserver"), ("jobs", "fit-trainer")} & set(cluster.objects_in(ns))
    assert part.job(job).restarts == 1
    assert "every replica restarts (1 of 1)" in job.events.get(reason="Restarting").message
    for pod in cluster.run_statefulset(ns, "fit-pserver-a1"):
        cluster.pod_running(ns, pod)
    cluster.statefulset_ready(ns, "fit-pserver-a1", 2)
    part.until(lambda: ("jobs", "fit-trainer-a1") in cluster.objects_in(ns), what="the new attempt's trainers")
    for pod in cluster.run_job(ns, "fit-trainer-a1"):
        cluster.pod_succeeded(ns, pod)
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded")
    assert {r.attempt for r in job.replicas.all()} == {1}


def test_a_trainer_evicted_for_its_disk_limit_fails_the_job_with_disk_limit_not_a_retry(alice, cluster, part):
    """The kubelet evicts a pod over its ephemeral-storage limit without a DisruptionTarget
    condition, so the trainer Job counts it and makes the index's next pod; that pod would only
    fill the disk again: the job fails with DiskLimit (no restart, as locally) and is stopped."""
    job, ns, pods = running(cluster, part, alice, mode="collective", pservers=0, trainers=2, max_restarts=2)
    assert cluster.trainer_evicted(ns, pods[1]) is not None, "counted, within backoffLimitPerIndex: a new pod"
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    assert job.reason == "DiskLimit", (job.reason, job.message)
    assert "exceeds the total limit of containers 10Gi" in job.message and "not restarted" in job.message
    r = replica(job, "trainer-1")
    assert (r.state, r.reason, r.exit_code) == (ReplicaState.FAILED, "DiskLimit", 137), r.message
    assert "disk_limit" in r.message
    assert not job.events.filter(reason="Restarting").exists()
    part.until(lambda: ("jobs", "fit-trainer") not in cluster.objects_in(ns), what="the trainers stopped")


def test_a_pserver_evicted_for_its_disk_limit_fails_the_job_though_its_statefulset_made_it_again(
        alice, cluster, part):
    job, ns, _ = running(cluster, part, alice, mode="ps", pservers=2, trainers=1)
    cluster.pod_evicted(ns, "fit-pserver-1")
    again = cluster.statefulset_replaces(ns, "fit-pserver-1")  # before the watcher saw the eviction
    assert cluster.store.phase(ns, again) == "Pending"
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    r = replica(job, "pserver-1")
    assert (job.reason, r.state, r.reason) == ("DiskLimit", ReplicaState.FAILED, "DiskLimit"), job.message
    assert job.restarts == 0


def test_a_node_pressure_eviction_is_a_disruption_the_trainer_job_replaces_uncounted(alice, cluster, part):
    """Evicted because the node ran low, not for its own limit: DisruptionTarget, ignored by the
    podFailurePolicy (not counted against max_restarts), so even with no restarts the job goes on."""
    job, ns, pods = running(cluster, part, alice, mode="collective", pservers=0, trainers=2)
    new = cluster.trainer_evicted(ns, pods[0], node_pressure=True)
    assert new and INDEX_FAILURES not in (cluster.store.get("pods", ns, new)["metadata"]["annotations"] or {})
    cluster.pod_running(ns, new)
    part.until(lambda: replica(job, "trainer-0").pod == new and replica(job, "trainer-0").reason == "Running",
               what="the new pod running")
    r = replica(job, "trainer-0")
    assert (part.job(job).state, r.state, r.restarts) == (JobState.RUNNING, ReplicaState.RUNNING, 0), job.message
