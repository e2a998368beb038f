# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Runtime images from requirements.txt built in the cluster (seed 001): kaniko builds in an
init container that never holds the push credentials; a second container pushes the tarball
with a Secret made for this build alone and deleted when it ends. The launch task only starts
the build: the watcher follows it and the launch continues once it is built."""

import base64
import json
import threading

import pytest
from django.db import connection

from accounts.models import Registry
from jobs.backends.kubernetes import hardening as k8s_hardening
from jobs.backends.kubernetes.runtime import IMAGE_TAR, PUSH_AUTH
from jobs.models import JobState
from tests.support import wait_for

from .k8s_fixtures import cluster, k8s_dc, launch, ns_of, part, watch  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
REQS = "paddlepaddle==2.6.2\nnumpy<2\n"
PUSH = {"registry.example.com": {"auth": "cHVzaDpzZWNyZXQ="}}
PULL = {"registry.example.com": {"auth": "cHVsbDpyZWFkb25seQ=="}}


def shared_secret(cluster, name, auths):
    cluster.store.create("secrets", "paddlecloud", {
        "metadata": {"name": name}, "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json.dumps({"auths": auths})}})


@pytest.fixture
def build_dc(k8s_dc, cluster):
    cluster.store.create("namespaces", None, {"metadata": {"name": "paddlecloud"}})
    shared_secret(cluster, "registry-push", PUSH)
    k8s_dc.config = {**k8s_dc.config, "secrets_namespace": "paddlecloud",
                     "build": {"enabled": True, "registry": "registry.example.com/pc", "push_secret": "registry-push"}}
    k8s_dc.save()
    return k8s_dc


def submit_with_requirements(user, name, reqs=REQS, **fields):
    from jobs.services import submit_job
    from tests.support import make_package

    package = make_package(user, name, {"train.py": "print(1)\n", "requirements.txt": reqs}, datacenter="k8s")
    return submit_job(user, {"name": name, "datacenter": "k8s", "package": package, "entry": "python train.py",
                             "mode": "collective", "pservers": 0, "trainers": 1, **fields})


def one_worker(jobs):
    """Their launch tasks, one after the other in one thread: a single Celery worker."""
    from jobs.tasks import launch_job

    def run():
        try:
            for job in jobs:
                launch_job.run(job.pk)
        finally:
            connection.close()

    t = threading.Thread(target=run)
    t.start()
    return t


def auths_of(cluster, ns, name) -> dict:
    data = cluster.store.get("secrets", ns, name)["data"][".dockerconfigjson"]
    return json.loads(base64.b64decode(data))["auths"]


def build_pod_spec(cluster, ns) -> dict:
    return build_pod_spec_of(cluster, ns, "fit-build")


def build_pod_spec_of(cluster, ns, name) -> dict:
    wait_for(lambda: ("jobs", name) in cluster.objects_in(ns), 20, f"the build Job {name}")
    return cluster.store.get("jobs", ns, name)["spec"]["template"]["spec"]


def built(watch, job):
    """Once its build Job is Complete, the watcher's passes continue the job's launch."""
    watch.until(lambda: watch.job(job).state != JobState.BUILDING, 20, f"{job.name} launched after its build")
    assert job.state == JobState.STARTING, job.message


def test_the_runtime_image_is_built_once_and_used(alice, build_dc, cluster, watch):
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    launch(job)
    assert job.state == JobState.BUILDING, "the launch task returns once the build is started"
    spec = build_pod_spec(cluster, ns)
    [kaniko], [push] = spec["initContainers"], spec["containers"]
    image = next(a.split("=", 1)[1] for a in kaniko["args"] if a.startswith("--destination="))
    # A repository of the user's own: another user's build cannot replace this image.
    assert image.startswith(f"registry.example.com/pc/paddlecloud-runtime/{ns}:")
    assert "--no-push" in kaniko["args"] and f"--tar-path={IMAGE_TAR}" in kaniko["args"]
    assert push["args"] == ["push", IMAGE_TAR, image]
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    built(watch, job)
    spec = cluster.store.get("jobs", ns, "fit-trainer")["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == image
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["PADDLECLOUD_RUNTIME_READY"] == "1"
    second = submit_with_requirements(alice, "again")
    launch(second)
    assert second.state == JobState.STARTING and ("jobs", "again-build") not in cluster.objects_in(ns)


def test_only_the_push_container_holds_the_push_credentials_and_only_while_the_build_runs(alice, build_dc, cluster,
                                                                                         watch):
    shared_secret(cluster, "registry-pull", PULL)
    build_dc.config = {**build_dc.config, "build": {**build_dc.config["build"], "pull_secret": "registry-pull"}}
    build_dc.save()
    reg = Registry.objects.create(user=alice, name="mine", server="hub.alice.example", username="a", password="pw")
    job = submit_with_requirements(alice, "fit", image="hub.alice.example/base:1", registry=reg.name)
    ns = ns_of(job)
    launch(job)
    spec = build_pod_spec(cluster, ns)
    [kaniko], [push] = spec["initContainers"], spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    secret_of = {name: (v.get("secret") or {}).get("secretName") for name, v in volumes.items()}
    kaniko_secrets = {secret_of[m["name"]] for m in kaniko["volumeMounts"]} - {None}
    push_secrets = {secret_of[m["name"]] for m in push["volumeMounts"]} - {None}
    # kaniko (which runs pip, i.e. user code) can pull the base image with alice's own registry,
    # and nothing more: not with the datacenter's pull secret, which reads every user's runtime images.
    assert kaniko_secrets == {"fit-pull-build"} and push_secrets == {"fit-push"}
    assert auths_of(cluster, ns, "fit-pull-build") == {
        "hub.alice.example": {"username": "a", "password": "pw", "auth": base64.b64encode(b"a:pw").decode()}}
    assert auths_of(cluster, ns, "fit-push") == PUSH
    assert {"name": "DOCKER_CONFIG", "value": PUSH_AUTH} in push["env"] and "env" not in kaniko
    assert ("secrets", "registry-push") not in cluster.objects_in(ns), "the push secret is never copied whole"
    # kaniko must be root to unpack images and run RUN steps: it keeps only the file capabilities.
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["automountServiceAccountToken"] is False and not spec["hostNetwork"] and not spec["hostPID"]
    assert kaniko["securityContext"] == {"runAsUser": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
                                         "privileged": False, "capabilities": {
                                             "drop": ["ALL"], "add": k8s_hardening.BUILD_CAPABILITIES}}
    assert push["securityContext"] == {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True,
                                       "allowPrivilegeEscalation": False, "privileged": False,
                                       "capabilities": {"drop": ["ALL"]}}
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    built(watch, job)
    left = {name for plural, name in cluster.objects_in(ns) if plural == "secrets"}
    assert left == {"fit-pull"}, "the build's secrets are deleted when it ends"
    # Pods pull the runtime image with the read-only credentials.
    assert auths_of(cluster, ns, "fit-pull")["registry.example.com"] == PULL["registry.example.com"]


def test_a_build_never_holds_the_pull_secret_that_reads_other_users_runtime_images(alice, bob, build_dc, cluster):
    """The datacenter's read-only pull secret reads every user's runtime image, each built FROM its
    user's base image (a private one too): bob's build, whose setup scripts can read whatever
    kaniko holds, gets none of it."""
    shared_secret(cluster, "registry-pull", PULL)
    build_dc.config = {**build_dc.config, "build": {**build_dc.config["build"], "pull_secret": "registry-pull"}}
    build_dc.save()
    job = submit_with_requirements(bob, "snoop")
    ns = ns_of(job)
    launch(job)
    [kaniko] = build_pod_spec_of(cluster, ns, "snoop-build")["initContainers"]
    assert [m["mountPath"] for m in kaniko["volumeMounts"]] == ["/context", "/image"]
    assert ("secrets", "snoop-pull-build") not in cluster.objects_in(ns)


def test_a_build_leaves_the_pull_secret_of_the_job_named_like_it_alone(alice, build_dc, cluster, watch):
    """Job `fit`'s build makes and deletes its own Secrets: never those of alice's job `fit-build`."""
    from jobs.services import submit_job
    from tests.support import make_package

    theirs = Registry.objects.create(user=alice, name="other", server="hub.other.example", username="o", password="x")
    package = make_package(alice, "fit-build", {"train.py": "print(1)\n"}, datacenter="k8s")
    other = submit_job(alice, {"name": "fit-build", "datacenter": "k8s", "package": package, "entry": "python train.py",
                               "mode": "collective", "pservers": 0, "trainers": 1, "registry": theirs.name})
    launch(other)
    ns = ns_of(other)
    before = auths_of(cluster, ns, "fit-build-pull")
    mine = Registry.objects.create(user=alice, name="mine", server="hub.alice.example", username="a", password="pw")
    job = submit_with_requirements(alice, "fit", image="hub.alice.example/base:1", registry=mine.name)
    launch(job)
    build_pod_spec(cluster, ns)
    assert auths_of(cluster, ns, "fit-build-pull") == before
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    built(watch, job)
    assert auths_of(cluster, ns, "fit-build-pull") == before, "job fit-build still pulls its image"


def test_without_a_pull_secret_the_push_credentials_never_outlive_the_build(alice, build_dc, cluster, watch):
    """build.pull_secret unset (the default): pods pull the runtime image anonymously; the push
    robot's credentials are in no Secret of the user's namespace once the build has ended."""
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    launch(job)
    build_pod_spec(cluster, ns)
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    built(watch, job)
    for secret in cluster.store.find("secrets", ns):
        data = secret.get("data") or {}
        if ".dockerconfigjson" in data:
            assert auths_of(cluster, ns, secret["metadata"]["name"]) != PUSH, secret["metadata"]["name"]
    spec = cluster.store.get("jobs", ns, "fit-trainer")["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in spec


@pytest.mark.parametrize("job_marked_failed", [True, False], ids=["job-failed", "pod-failed-first"])
def test_a_failed_build_fails_the_job_with_the_build_log(alice, build_dc, cluster, watch, job_marked_failed):
    """Whether the backend first sees the failed pod or the Job marked Failed (in a cluster
    the pod fails a moment before the Job controller says so), kaniko's log's end is reported."""
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    launch(job)
    build_pod_spec(cluster, ns)
    pod = cluster.run_job(ns, "fit-build")[0]
    cluster.log(ns, pod, "ERROR: No matching distribution found for paddlepaddle==2.6.2")
    cluster.init_failed(ns, pod, "kaniko", exit_code=1)
    if job_marked_failed:
        cluster.job_condition(ns, "fit-build", "Failed", "BackoffLimitExceeded", "")
    watch.until(lambda: watch.job(job).state != JobState.BUILDING, 20, "the job to end with its build")
    assert job.state == JobState.FAILED and job.reason == "RuntimeImageBuildFailed"
    assert "No matching distribution" in job.message
    assert any(f"/pods/{pod}/log?" in p and "container=kaniko" in p for _, _, p in cluster.requests)
    if not job_marked_failed:
        assert "building: exited with code 1" in job.message
    wait_for(lambda: cluster.objects_in(ns) == [], 10, f"the build removed with the job: {cluster.objects_in(ns)}")


def test_a_build_evicted_for_its_disk_limit_fails_the_job_saying_so(alice, build_dc, cluster, watch):
    """kaniko unpacks the base image on the node's disk: the build pod has build.disk_limit
    (requested = limited); one that writes more is evicted by its kubelet, which the job's
    reason says, with the key to raise."""
    build_dc.config = {**build_dc.config, "disk_limit": "5Gi", "build": {**build_dc.config["build"],
                                                                         "disk_limit": "30Gi"}}
    build_dc.save()
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    launch(job)
    spec = build_pod_spec(cluster, ns)
    for c in spec["initContainers"] + spec["containers"]:
        res = c["resources"]
        assert res["requests"]["ephemeral-storage"] == res["limits"]["ephemeral-storage"] == "30Gi", c["name"]
    pod = cluster.run_job(ns, "fit-build")[0]
    cluster.pod_evicted(ns, pod)
    watch.until(lambda: watch.job(job).state != JobState.BUILDING, 20, "the job to end with its build")
    assert (job.state, job.reason) == (JobState.FAILED, "RuntimeImageBuildFailed")
    assert "build.disk_limit" in job.message and "exceeds the total limit of containers 30Gi" in job.message


def test_a_burst_of_builds_is_launched_by_one_worker_without_waiting_for_them(alice, build_dc, cluster, watch):
    """Six jobs needing an image build, launched by one worker: every build is started before any
    ends (the launch task does not wait for its build), and each job goes on when its own does."""
    jobs = [submit_with_requirements(alice, f"b{i}", reqs=f"numpy=={i}.0\n") for i in range(6)]
    ns = ns_of(jobs[0])
    worker = one_worker(jobs)
    worker.join(60)
    assert not worker.is_alive(), "a launch task waited for its build"
    builds = {name for plural, name in cluster.objects_in(ns) if plural == "jobs"}
    assert builds == {f"b{i}-build" for i in range(6)}
    assert not any((cluster.store.get("jobs", ns, b).get("status") or {}).get("conditions") for b in builds)
    assert {watch.job(j).state for j in jobs} == {JobState.BUILDING}
    for i, job in enumerate(jobs):
        cluster.job_condition(ns, f"b{i}-build", "Complete", "Completed", "")
        built(watch, job)
        [pod] = cluster.run_job(ns, f"b{i}-trainer")
        cluster.pod_running(ns, pod)
        watch.until(lambda job=job: watch.job(job).state == JobState.RUNNING, 20, f"{job.name} running")
        assert all(watch.job(j).state == JobState.BUILDING for j in jobs[i + 1:]), "they wait for their builds"


def test_two_jobs_with_the_same_requirements_at_once_each_build_it(alice, build_dc, cluster, watch):
    """The chosen behaviour: each builds (the same image); neither waits on the other's build,
    which the other's kill would take away. A job launched after either is built reuses it."""
    first, second = submit_with_requirements(alice, "fit"), submit_with_requirements(alice, "again")
    ns = ns_of(first)
    launch(first)
    launch(second)
    destination = {name: next(a for a in build_pod_spec_of(cluster, ns, name)["initContainers"][0]["args"]
                              if a.startswith("--destination=")) for name in ("fit-build", "again-build")}
    assert destination["fit-build"] == destination["again-build"]
    cluster.job_condition(ns, "again-build", "Complete", "Completed", "")
    built(watch, second)
    assert watch.job(first).state == JobState.BUILDING, "its own build is still under way"
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    built(watch, first)
    third = submit_with_requirements(alice, "third")
    launch(third)
    assert third.state == JobState.STARTING and ("jobs", "third-build") not in cluster.objects_in(ns)


def test_the_launch_queued_again_during_a_build_is_harmless_and_settles_one_nobody_followed(alice, build_dc,
                                                                                             cluster):
    """The reconcile queues the launch of a Building job nobody holds again: during the build it
    changes nothing; once the build has ended unseen by a watcher (none running, or the job was
    suspended meanwhile) it does what the watcher would have and starts the replicas."""
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    launch(job)
    before = cluster.objects_in(ns)
    launch(job)
    assert job.state == JobState.BUILDING and job.heartbeat is None and cluster.objects_in(ns) == before
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    launch(job)
    assert job.state == JobState.STARTING, job.message
    assert ("secrets", "fit-push") not in cluster.objects_in(ns) and ("jobs", "fit-trainer") in cluster.objects_in(ns)


def deleted(cluster, ns, name) -> bool:
    return any(m == "DELETE" and p.startswith(f"/api/v1/namespaces/{ns}/secrets/{name}")
               for _, m, p in cluster.requests)


@pytest.mark.parametrize("outcome", ["complete", "failed", "killed"])
def test_the_push_secret_is_deleted_when_the_build_ends(alice, build_dc, cluster, watch, outcome):
    """Completed or failed, the build's push credentials are deleted as it ends (the watcher
    deletes them, not only the cascade of the job's end); a kill removes the build with them."""
    from jobs.services import kill_job
    from jobs.tasks import stop_job

    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    launch(job)
    build_pod_spec(cluster, ns)
    assert ("secrets", "fit-push") in cluster.objects_in(ns)
    [pod] = cluster.run_job(ns, "fit-build")
    if outcome == "complete":
        cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
        built(watch, job)
        assert ("secrets", "fit-push") not in cluster.objects_in(ns) and deleted(cluster, ns, "fit-push")
        assert ("jobs", "fit-trainer") in cluster.objects_in(ns)
    elif outcome == "failed":
        cluster.init_failed(ns, pod, "kaniko", exit_code=1)
        watch.until(lambda: watch.job(job).state == JobState.FAILED, 20, "the job failed with its build")
        assert deleted(cluster, ns, "fit-push")
    else:
        kill_job(job)
        stop_job.run(job.pk)
        assert watch.job(job).state == JobState.KILLED
    if outcome != "complete":
        wait_for(lambda: cluster.objects_in(ns) == [], 10, lambda: f"the build removed: {cluster.objects_in(ns)}")


def test_a_build_that_cannot_start_fails_the_job_after_the_pending_timeout(alice, build_dc, cluster, watch):
    build_dc.config = {**build_dc.config, "pending_timeout": 1}
    build_dc.save()
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    launch(job)
    build_pod_spec(cluster, ns)
    [pod] = cluster.run_job(ns, "fit-build")
    cluster.pod_unschedulable(ns, pod, "0/3 nodes are available: 3 Insufficient cpu.")
    watch.until(lambda: watch.job(job).state == JobState.FAILED, 20, "the job failed: its build never started")
    assert job.reason == "Unschedulable", job.reason
    assert job.message == ("the image build did not start within 1 s: "
                           "0/3 nodes are available: 3 Insufficient cpu."), job.message
    wait_for(lambda: cluster.objects_in(ns) == [], 10, lambda: f"the build removed: {cluster.objects_in(ns)}")
