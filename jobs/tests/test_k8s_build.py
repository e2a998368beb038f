# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Runtime images from requirements.txt built in the cluster (seed 001): kaniko builds in an
init container that never holds the push credentials; a second container pushes the tarball
with a Secret made for this build alone and deleted when it ends."""

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

from .k8s_fixtures import cluster, k8s_dc, ns_of  # noqa: F401

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


def submit_with_requirements(user, name, **fields):
    from jobs.services import submit_job
    from tests.support import make_package

    package = make_package(user, name, {"train.py": "print(1)\n", "requirements.txt": REQS}, datacenter="k8s")
    return submit_job(user, {"name": name, "datacenter": "k8s", "package": package, "entry": "python train.py",
                             "mode": "collective", "pservers": 0, "trainers": 1, **fields})


def launch_in_background(job):
    from jobs.tasks import launch_job

    def run():
        try:
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
    wait_for(lambda: ("jobs", "fit-build") in cluster.objects_in(ns), 20, "the build Job")
    return cluster.store.get("jobs", ns, "fit-build")["spec"]["template"]["spec"]


def test_the_runtime_image_is_built_once_and_used(alice, build_dc, cluster):
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    t = launch_in_background(job)
    spec = build_pod_spec(cluster, ns)
    [kaniko], [push] = spec["initContainers"], spec["containers"]
    image = next(a.split("=", 1)[1] for a in kaniko["args"] if a.startswith("--destination="))
    # A repository of the user's own: another user's build cannot replace this image.
    assert image.startswith(f"registry.example.com/pc/paddlecloud-runtime/{ns}:")
    assert "--no-push" in kaniko["args"] and f"--tar-path={IMAGE_TAR}" in kaniko["args"]
    assert push["args"] == ["push", IMAGE_TAR, image]
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    t.join(30)
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.message
    spec = cluster.store.get("jobs", ns, "fit-trainer")["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == image
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["PADDLECLOUD_RUNTIME_READY"] == "1"
    second = submit_with_requirements(alice, "again")
    t = launch_in_background(second)
    t.join(30)
    second.refresh_from_db()
    assert second.state == JobState.STARTING and ("jobs", "again-build") not in cluster.objects_in(ns)


def test_only_the_push_container_holds_the_push_credentials_and_only_while_the_build_runs(alice, build_dc, cluster):
    shared_secret(cluster, "registry-pull", PULL)
    build_dc.config = {**build_dc.config, "build": {**build_dc.config["build"], "pull_secret": "registry-pull"}}
    build_dc.save()
    reg = Registry.objects.create(user=alice, name="mine", server="hub.alice.example", username="a", password="pw")
    job = submit_with_requirements(alice, "fit", image="hub.alice.example/base:1", registry=reg.name)
    ns = ns_of(job)
    t = launch_in_background(job)
    spec = build_pod_spec(cluster, ns)
    [kaniko], [push] = spec["initContainers"], spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    secret_of = {name: (v.get("secret") or {}).get("secretName") for name, v in volumes.items()}
    kaniko_secrets = {secret_of[m["name"]] for m in kaniko["volumeMounts"]} - {None}
    push_secrets = {secret_of[m["name"]] for m in push["volumeMounts"]} - {None}
    # kaniko (which runs pip, i.e. user code) can pull the base image, and nothing more.
    assert kaniko_secrets == {"fit-build-pull"} and push_secrets == {"fit-push"}
    assert auths_of(cluster, ns, "fit-build-pull") == {
        "registry.example.com": PULL["registry.example.com"],
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
    t.join(30)
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.message
    left = {name for plural, name in cluster.objects_in(ns) if plural == "secrets"}
    assert left == {"fit-pull"}, "the build's secrets are deleted when it ends"
    # Pods pull the runtime image with the read-only credentials.
    assert auths_of(cluster, ns, "fit-pull")["registry.example.com"] == PULL["registry.example.com"]


def test_without_a_pull_secret_the_push_credentials_never_outlive_the_build(alice, build_dc, cluster):
    """build.pull_secret unset (the default): pods pull the runtime image anonymously; the push
    robot's credentials are in no Secret of the user's namespace once the build has ended."""
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    t = launch_in_background(job)
    build_pod_spec(cluster, ns)
    cluster.job_condition(ns, "fit-build", "Complete", "Completed", "")
    t.join(30)
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.message
    for secret in cluster.store.find("secrets", ns):
        data = secret.get("data") or {}
        if ".dockerconfigjson" in data:
            assert auths_of(cluster, ns, secret["metadata"]["name"]) != PUSH, secret["metadata"]["name"]
    spec = cluster.store.get("jobs", ns, "fit-trainer")["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in spec


@pytest.mark.parametrize("job_marked_failed", [True, False], ids=["job-failed", "pod-failed-first"])
def test_a_failed_build_fails_the_job_with_the_build_log(alice, build_dc, cluster, job_marked_failed):
    """Whether the backend first sees the failed pod or the Job marked Failed (in a cluster
    the pod fails a moment before the Job controller says so), kaniko's log's end is reported."""
    job = submit_with_requirements(alice, "fit")
    ns = ns_of(job)
    t = launch_in_background(job)
    build_pod_spec(cluster, ns)
    pod = cluster.run_job(ns, "fit-build")[0]
    cluster.log(ns, pod, "ERROR: No matching distribution found for paddlepaddle==2.6.2")
    cluster.init_failed(ns, pod, "kaniko", exit_code=1)
    if job_marked_failed:
        cluster.job_condition(ns, "fit-build", "Failed", "BackoffLimitExceeded", "")
    t.join(30)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.reason == "RuntimeImageBuildFailed"
    assert "No matching distribution" in job.message
    assert any(f"/pods/{pod}/log?" in p and "container=kaniko" in p for _, _, p in cluster.requests)
    if not job_marked_failed:
        assert "building: exited with code 1" in job.message
    wait_for(lambda: cluster.objects_in(ns) == [], 10, f"the build removed with the job: {cluster.objects_in(ns)}")
