# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""The kubernetes backend driven through the official client over HTTP against the emulated
cluster: launch order, idempotency, faults, stop and delete."""

import pytest

from jobs.backends.base import LaunchError
from jobs.backends.kubernetes import manifests
from jobs.backends.registry import get_backend
from jobs.models import Job, JobState

from .k8s_fixtures import cluster, k8s_dc, launch, ns_of, submit  # noqa: F401

pytestmark = pytest.mark.django_db


def test_launch_creates_pservers_first_with_owner_references(alice, k8s_dc, cluster):
    job = submit(alice, "fit")
    launch(job)
    assert job.state == JobState.STARTING, job.message
    ns = ns_of(job)
    assert ns.startswith("paddle-alice-") and ns in cluster.namespaces()
    quota = cluster.store.get("resourcequotas", ns, "paddlecloud-quota")
    assert quota["spec"]["hard"]["limits.cpu"] == "64000m"
    root = cluster.store.get("configmaps", ns, "fit")
    assert cluster.objects_in(ns) == [("configmaps", "fit"), ("networkpolicies", "fit-peers"),
                                      ("services", "fit-pserver"), ("services", "fit-trainer"),
                                      ("statefulsets", "fit-pserver")]
    for plural, name in cluster.objects_in(ns):
        obj = cluster.store.get(plural, ns, name)
        assert obj["metadata"]["labels"][manifests.LABEL_JOB] == "fit"
        if name != "fit":
            assert obj["metadata"]["ownerReferences"][0]["uid"] == root["metadata"]["uid"]
    hosts = {(r.role, r.index): (r.host, r.port) for r in job.replicas.all()}
    assert hosts[("pserver", 1)] == (f"fit-pserver-1.fit-pserver.{ns}.svc", 7164)
    assert hosts[("trainer", 0)] == (f"fit-trainer-0.fit-trainer.{ns}.svc", 8500)


def test_api_500s_are_retried_and_a_lost_answer_is_not_an_error(alice, k8s_dc, cluster):
    job = submit(alice, "fit")
    cluster.fail("post", r"/api/v1/namespaces", 500, times=2)
    cluster.fail("post", r"/apis/apps/v1/namespaces/[^/]+/statefulsets", 500, times=1, after=True)  # made, answer lost
    cluster.fail("post", r"/api/v1/namespaces/[^/]+/services", 503, times=1)
    launch(job)
    assert job.state == JobState.STARTING, job.message
    ns = ns_of(job)
    assert ("statefulsets", "fit-pserver") in cluster.objects_in(ns)
    posts = [p for _, m, p in cluster.requests if m == "POST" and p.endswith("/statefulsets")]
    assert len(posts) == 2, "retried once, then 409 AlreadyExists counted as done"


def test_a_burst_of_launches_sets_the_users_namespace_up_once_and_few_requests_each(alice, k8s_dc, cluster):
    """The namespace, its quota and policies are asserted once per user (and again when they
    change), not twice per job: a launch is then the job's own few objects."""
    from quotas.models import Quota

    jobs = [submit(alice, f"fit-{i}") for i in range(5)]
    start = len(cluster.requests)
    launch(jobs[0])
    first = len(cluster.requests)
    for job in jobs[1:]:
        launch(job)
        assert job.state == JobState.STARTING, job.message
    made = cluster.requests[start:]
    assert sum(m == "POST" and p.endswith("/namespaces") for _, m, p in made) == 1
    assert sum("/resourcequotas" in p for _, m, p in made if m != "GET") == 1
    assert sum(m in ("POST", "PUT") and "/networkpolicies" in p for _, m, p in made) == 2 + 5  # namespace's, jobs'
    per_job = (len(cluster.requests) - first) / 4
    assert per_job <= 5, [f"{m} {p}" for _, m, p in cluster.requests[first:]]
    # A changed quota reaches the namespace at the next launch.
    Quota.objects.filter(datacenter=k8s_dc, user=None).update(cpu_millicores=32000)
    launch(submit(alice, "after"))
    quota = cluster.store.get("resourcequotas", ns_of(jobs[0]), "paddlecloud-quota")
    assert quota["spec"]["hard"]["limits.cpu"] == "32000m"


def test_a_namespace_deleted_behind_the_services_back_is_made_again(alice, bob, k8s_dc, cluster, monkeypatch):
    from jobs.backends.kubernetes import setup

    launch(submit(alice, "first", mode="collective", pservers=0, trainers=1))
    ns = ns_of(submit(alice, "second", mode="collective", pservers=0, trainers=1))
    cluster.store.delete("namespaces", None, ns)  # with everything in it
    cluster.store.delete("resourcequotas", ns, "paddlecloud-quota")
    second = Job.objects.get(name="second")
    launch(second)
    assert second.state == JobState.STARTING, second.message
    assert ns in cluster.namespaces() and cluster.store.get("resourcequotas", ns, "paddlecloud-quota")
    # And after SETUP_TTL_SECONDS, a launch asserts the setup again (a Secret changed at its source).
    monkeypatch.setattr(setup, "SETUP_TTL_SECONDS", 0)
    launch(first := submit(bob, "first", mode="collective", pservers=0, trainers=1))
    cluster.store.delete("networkpolicies", ns_of(first), "paddlecloud-isolation")
    launch(submit(bob, "second", mode="collective", pservers=0, trainers=1))
    assert cluster.store.get("networkpolicies", ns_of(first), "paddlecloud-isolation")


def test_launch_twice_is_harmless(alice, k8s_dc, cluster):
    job = submit(alice, "fit", mode="collective", pservers=0, trainers=2)
    launch(job)
    before = cluster.objects_in(ns_of(job))
    get_backend(job.datacenter).launch(job)
    assert cluster.objects_in(ns_of(job)) == before
    assert ("jobs", "fit-trainer") in before, "collective trainers start at once"


def test_persistent_server_errors_fail_the_launch_with_the_cause(alice, k8s_dc, cluster):
    job = submit(alice, "fit")
    cluster.fail("post", r"/api/v1/namespaces/[^/]+/configmaps", 500, times=50)
    launch(job)
    assert job.state == JobState.FAILED and "500" in job.message


def test_kill_leaves_nothing_behind_and_delete_waits_for_the_cluster(alice, k8s_dc, cluster):
    from jobs.services import kill_job
    from jobs.tasks import stop_job

    job = submit(alice, "fit")
    launch(job)
    ns = ns_of(job)
    cluster.run_statefulset(ns, "fit-pserver")
    kill_job(job)
    stop_job.run(job.pk)
    assert cluster.objects_in(ns) == []
    backend = get_backend(job.datacenter)
    backend.stop(job)  # again: nothing to do, no error
    backend.delete(job)
    backend.delete(job)


def test_resubmitting_the_name_of_a_job_still_being_deleted_gets_a_clear_answer(alice, k8s_dc, cluster, monkeypatch):
    from jobs.backends.kubernetes import root

    monkeypatch.setattr(root, "ROOT_WAIT_SECONDS", 1)
    monkeypatch.setattr(root, "DELETE_WAIT_SECONDS", 1)
    job = submit(alice, "fit", mode="collective", pservers=0, trainers=1)
    launch(job)
    cluster.store.slow_deletion = True  # the garbage collector takes its time
    with pytest.raises(LaunchError, match="DeleteTimeout|has not finished"):
        get_backend(job.datacenter).delete(job)
    # The old row is gone (say, an operator removed it); a new job of that name meets the old root.
    job.delete()
    again = submit(alice, "fit", mode="collective", pservers=0, trainers=1)
    launch(again)
    assert again.state == JobState.FAILED and again.reason == "NameInUse"
    assert "still deleting" in again.message and "'fit'" in again.message
    cluster.store.finish_deletions()
    assert cluster.objects_in(ns_of(job)) == []


def test_registry_credentials_become_a_pull_secret(alice, k8s_dc, cluster):
    import base64
    import json

    from accounts.models import Registry

    Registry.objects.create(user=alice, name="corp", server="registry.corp:5000", username="bot", password="s3cret")
    job = submit(alice, "fit", registry="corp", image="registry.corp:5000/paddle:2.6.2")
    launch(job)
    ns = ns_of(job)
    secret = cluster.store.get("secrets", ns, "fit-pull")
    auths = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))["auths"]
    assert auths["registry.corp:5000"]["password"] == "s3cret" and secret["type"] == "kubernetes.io/dockerconfigjson"
    pod_spec = cluster.store.get("statefulsets", ns, "fit-pserver")["spec"]["template"]["spec"]
    assert pod_spec["imagePullSecrets"] == [{"name": "fit-pull"}]
    assert pod_spec["containers"][0]["image"] == "registry.corp:5000/paddle:2.6.2"


def test_pods_get_the_checkpoint_dir_in_the_mounted_home_made_by_the_launch(alice, k8s_dc, cluster):
    from pfs.paths import home

    job = submit(alice, "fit")
    launch(job)
    assert job.state == JobState.STARTING, job.message
    assert home(alice, k8s_dc.name).child("jobs", "fit", "checkpoints").disk.is_dir()
    pod = cluster.store.get("statefulsets", ns_of(job), "fit-pserver")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    mounts = {m["subPath"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] == "pfs"}
    home_at = next(at for sub, at in mounts.items() if sub.endswith("/home/alice"))
    assert env["PADDLE_CHECKPOINT_DIR"] == f"{home_at}/jobs/fit/checkpoints"
