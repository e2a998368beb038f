# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Under Kueue every job runs as one JobSet (the jobset layout), which Kueue admits as one
Workload: the manifest valid against the vendored JobSet CRD and each replicated job's template a
valid Job, the trainers' depending on the pservers being Ready; over HTTP against the emulator
(its JobSet controller and Kueue): nothing runs before admission, then the pservers and, once they
are ready, the trainers; success with the trainers, suspend / resume, a gang restart and delete."""

import copy

import jsonschema
import pytest

from jobs.backends import contract
from jobs.backends.kubernetes import gang, manifests, workloads
from jobs.backends.kubernetes.config import parse
from jobs.backends.kubernetes.gang import WORKLOAD, Watched
from jobs.backends.kubernetes.informer import JOB, ClusterState
from jobs.backends.kubernetes.layouts import JobSetLayout, Plain, layout_for
from jobs.backends.kubernetes.workloads import PodOptions
from jobs.backends.registry import get_backend
from jobs.live import logstore
from jobs.models import Job, JobState, ReplicaState
from jobs.state import attempts

from .k8s_emulator import now
from .k8s_fixtures import FAST, cluster, k8s_dc, launch, ns_of, part, started_long_ago, submit  # noqa: F401
from .k8s_jobset import JOBSET_NAME, RJ_NAME
from .test_k8s_gang import crd_validator, use_gang
from .test_k8s_manifests import ROOT, make_job, pod_env, validate

NS = "paddle-alice-1234abcd"
KUEUE = {"gang_scheduler": "kueue", "kueue_queue": "team-a"}


def validate_jobset(obj: dict) -> None:
    """The JobSet against its CRD (strict), and each replicated job's template as the batch/v1
    Job the JobSet controller makes of it, with the Kubernetes schemas (strict)."""
    assert obj["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and obj["kind"] == "JobSet"
    crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2").validate(obj)
    for rj in obj["spec"]["replicatedJobs"]:
        tpl = rj["template"]
        validate({"apiVersion": "batch/v1", "kind": "Job",
                  "metadata": {**tpl.get("metadata", {}), "name": f"{obj['metadata']['name']}-{rj['name']}-0",
                               "namespace": obj["metadata"].get("namespace", NS)},
                  "spec": tpl["spec"]})


OPTS = PodOptions("paddle", False, ("fit-pull",), 10)


def make_jobset(job, settings, attempt=0, ns=NS):
    [js] = layout_for(settings).manifests(job, ns, manifests.owner_reference(ROOT), attempt, OPTS)
    return js


def env_of(spec: dict) -> dict:
    return {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.django_db
@pytest.mark.parametrize("policy", [dict(restart_mode="replica", max_restarts=None, permanent_exit_codes="2"),
                                    dict(restart_mode="gang", max_restarts=5, permanent_exit_codes="")],
                         ids=["replica", "gang"])
@pytest.mark.parametrize("attempt", [0, 37])
@pytest.mark.parametrize("extra", [{}, {"cluster_domain": "cluster.local", "priority_class_name": "batch"}],
                         ids=["plain", "fqdn"])
def test_a_pserver_job_under_kueue_is_one_valid_jobset_with_the_trainer_job_inside(alice, policy, attempt, extra):
    settings = parse("k8s", {**FAST, **KUEUE, **extra})
    job = make_job(alice, mode="ps", pservers=2, trainers=3, **policy)
    js = make_jobset(job, settings, attempt)
    validate_jobset(js)
    name = manifests.jobset_name(job, attempt)
    assert js["metadata"]["name"] == name and js["metadata"]["ownerReferences"][0]["uid"] == ROOT["metadata"]["uid"]
    assert js["metadata"]["labels"][gang.QUEUE_LABEL] == "team-a"
    assert js["metadata"]["labels"][manifests.LABEL_ATTEMPT] == str(attempt)
    spec = js["spec"]
    assert spec["suspend"] is True, "Kueue unsuspends it once admitted"
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["trainer"]}
    assert spec["failurePolicy"] == {"maxRestarts": 0}, "gang restarts are the lifecycle's"
    assert spec["network"]["enableDNSHostnames"] is True and spec["network"]["subdomain"] == name
    ps, tr = ({rj["name"]: rj for rj in spec["replicatedJobs"]}[r] for r in ("pserver", "trainer"))
    assert ps["replicas"] == tr["replicas"] == 1
    assert tr["dependsOn"] == [{"name": "pserver", "status": "Ready"}], "seed 001's order, kept by the controller"
    assert "startupPolicy" not in spec, "deprecated for dependsOn (see the vendored CRD)"
    assert (ps["template"]["spec"]["completions"], ps["template"]["spec"]["parallelism"]) == (2, 2)
    assert ps["template"]["spec"]["completionMode"] == "Indexed" and ps["template"]["spec"]["backoffLimit"] == 0
    # The trainers' Job spec is the one a trainer Job of its own gets, but for its DNS names.
    plain = parse("k8s", {**FAST, **extra})
    own = workloads.trainer_job(job, plain, NS, None, Plain(plain, gang.Gang(plain)).hosts(job, NS, attempt), OPTS,
                                attempt)["spec"]
    mine = copy.deepcopy(tr["template"]["spec"])
    for spec_ in (own, mine):
        spec_["template"]["spec"]["containers"][0].pop("env")
        spec_["template"]["spec"]["initContainers"][0].pop("env")
        spec_["template"]["spec"].pop("subdomain")
    assert mine == own
    for role, rj in (("pserver", ps), ("trainer", tr)):
        pod = rj["template"]["spec"]["template"]
        assert pod["metadata"]["labels"][manifests.LABEL_ROLE] == role
        assert pod["metadata"]["labels"][manifests.LABEL_ATTEMPT] == str(attempt)
        assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["subdomain"] == name
    # Every replica's address is the JobSet's pod DNS name: <jobset>-<rj>-0-<i>.<subdomain>.
    domain = settings.service_domain(NS)
    endpoints = [f"{name}-pserver-0-{i}.{name}.{domain}:{settings.pserver_port}" for i in range(2)]
    for rj in (ps, tr):
        assert env_of(rj["template"]["spec"])["PADDLE_PSERVERS_IP_PORT_LIST"] == ",".join(endpoints)
    assert env_of(ps["template"]["spec"])["POD_IP"] == f"{name}-pserver-0-$(PADDLECLOUD_INDEX).{name}.{domain}"
    assert env_of(tr["template"]["spec"])["POD_IP"] == f"{name}-trainer-0-$(PADDLECLOUD_INDEX).{name}.{domain}"
    assert "PADDLE_TRAINER_ID" not in env_of(ps["template"]["spec"])
    assert [e["name"] for e in ps["template"]["spec"]["template"]["spec"]["containers"][0]["env"]][0] == \
        "PADDLECLOUD_INDEX", "the index is defined before the values that use it"


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["ps", "collective"])
def test_each_jobset_pod_gets_exactly_the_process_contract_with_its_dns_name(alice, mode):
    settings = parse("k8s", {**FAST, **KUEUE})
    job = make_job(alice, mode=mode, pservers=2, trainers=3)  # a collective job with pservers: a JobSet too
    topo = JobSetLayout(settings, gang.Kueue(settings)).topology(job, NS, 0)
    home = f"/pfs/k8s/home/{alice.username}"
    for rj in make_jobset(job, settings)["spec"]["replicatedJobs"]:
        role, container = rj["name"], rj["template"]["spec"]["template"]["spec"]["containers"][0]
        for i in range(rj["template"]["spec"]["completions"]):
            # An Indexed Job's pod: a generated name, its index in an annotation.
            got = pod_env(container, f"fit-{role}-0-{i}-x7k2q", {}, {manifests.COMPLETION_INDEX: str(i)})
            want = contract.replica_env(job, role, i, topo, pfs_home=home, package=job.package)
            assert {k: got[k] for k in want} == want, (role, i)
            assert got["POD_IP"] == f"fit-{role}-0-{i}.fit.{NS}.svc"


@pytest.mark.django_db
def test_the_jobset_schema_check_rejects_what_the_api_server_would(alice):
    js = make_jobset(make_job(alice), parse("k8s", {**FAST, **KUEUE}))
    for broken in ({"successPolicy": {"operator": "Most"}}, {"failurePolicy": {"maxRestarts": "0"}},
                   {"network": {"enableDnsHostnames": True}}, {"replicatedJob": []}):
        bad = copy.deepcopy(js)
        bad["spec"].update(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_jobset(bad)


@pytest.mark.django_db
def test_the_layout_is_the_datacenters_a_jobset_for_every_job_under_kueue_only(alice):
    assert isinstance(layout_for(parse("k8s", {**FAST, **KUEUE})), JobSetLayout)
    assert isinstance(layout_for(parse("k8s", {**FAST, "gang_scheduler": "volcano"})), Plain)
    assert isinstance(layout_for(parse("k8s", dict(FAST))), Plain)
    kueue = parse("k8s", {**FAST, **KUEUE})
    collective = make_jobset(make_job(alice, mode="collective", pservers=0, trainers=3), kueue)
    validate_jobset(collective)
    assert [rj["name"] for rj in collective["spec"]["replicatedJobs"]] == ["trainer"]
    assert "dependsOn" not in collective["spec"]["replicatedJobs"][0]
    job = make_job(alice, name="a" * 40)
    for attempt in (0, 1295):  # the longest host name within a DNS label's 63 characters
        assert len(f"{manifests.jobset_job_name(job, 'trainer', attempt)}-999") <= 63


def test_kueues_workload_of_a_jobset_marks_its_job_changed_through_the_jobsets_jobs():
    state = ClusterState("paddle-", Watched(WORKLOAD, gang.WORKLOAD_API, ours_by_label=False))
    ns = "paddle-alice-1234abcd"
    state.apply(JOB, "ADDED", {"metadata": {"name": "fit-a1-trainer-0", "namespace": ns, "uid": "u1", "labels": {
        manifests.LABEL_JOB_ID: "7", JOBSET_NAME: "fit-a1", RJ_NAME: "trainer"}}})
    state.take_dirty()
    state.apply(WORKLOAD, "ADDED", {"metadata": {"name": "jobset-fit-a1-1a2b3", "namespace": ns, "uid": "w1",
                                                 "ownerReferences": [{"kind": "JobSet", "name": "fit-a1"}]}})
    assert state.take_dirty() == {7}
    state.apply(WORKLOAD, "ADDED", {"metadata": {"name": "jobset-other-1a2b3", "namespace": ns, "uid": "w2",
                                                 "ownerReferences": [{"kind": "JobSet", "name": "other"}]}})
    assert state.take_dirty() == set()


# --- over HTTP -------------------------------------------------------------------------------
def queued(alice, cluster, part, k8s_dc, **fields):
    use_gang(k8s_dc, **KUEUE)
    job = submit(alice, "fit", mode="ps", pservers=2, trainers=2, **fields)
    launch(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    return job, ns_of(job)


def admitted_and_running(cluster, part, job, ns, name="fit") -> list[str]:
    cluster.kueue_workload(ns, name, admitted=True)
    pods = cluster.start_jobset(ns, name)
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
    return pods


@pytest.mark.django_db(transaction=True)
def test_kueue_admits_a_pserver_job_whole_as_one_jobset_and_it_succeeds_with_its_trainers(
        alice, cluster, k8s_dc, part):
    job, ns = queued(alice, cluster, part, k8s_dc)
    objects = cluster.objects_in(ns)
    assert ("jobsets", "fit") in objects
    assert not [o for o in objects if o[0] == "statefulsets"], "no pserver StatefulSet of its own"
    assert {n for p, n in objects if p == "jobs"} == {"fit-pserver-0"}, "the JobSet's (trainers' once pservers ready)"
    assert {n for p, n in objects if p == "services"} == {"fit"}, "only the JobSet's own headless Service"
    js = cluster.store.get("jobsets", ns, "fit")
    validate_jobset(js)
    assert js["metadata"]["ownerReferences"][0]["uid"] == cluster.store.get("configmaps", ns, "fit")["metadata"]["uid"]
    pserver = job.replicas.get(role="pserver", index=1)
    assert pserver.host == f"fit-pserver-0-1.fit.{ns}.svc", "the JobSet pod's DNS name"
    # Queued: Kueue's own words on the job, and no pod at all.
    why = "couldn't assign flavors to pod set trainer: insufficient unused quota for cpu in flavor default"
    cluster.kueue_workload(ns, "fit", admitted=False, message=why)
    part.until(lambda: part.job(job).reason == "KueueQueued" and why in job.message, what="Kueue's reason on the job")
    assert job.state == JobState.STARTING
    assert all((r.state, r.reason) == (ReplicaState.PENDING, "KueueQueued") for r in job.replicas.all())
    with pytest.raises(AssertionError, match="suspended"):
        cluster.run_jobset(ns, "fit")
    assert cluster.store.find("pods", ns) == []
    # Admitted: the pservers, then, once they are ready, the trainers (dependsOn).
    cluster.kueue_workload(ns, "fit", admitted=True)
    pservers = cluster.run_jobset(ns, "fit")
    assert len(pservers) == 2 and ("jobs", "fit-trainer-0") not in cluster.objects_in(ns)
    part.until(lambda: job.replicas.get(role="trainer", index=1).reason == "WaitingForPservers",
               what="the trainers waiting for the pservers")
    cluster.pod_running(ns, pservers[0])
    assert ("jobs", "fit-trainer-0") not in cluster.objects_in(ns), "one pserver is not ready yet"
    cluster.pod_running(ns, pservers[1])
    pods = pservers + cluster.start_jobset(ns, "fit")
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
    assert len(pods) == 4 and all(r.state == ReplicaState.RUNNING for r in job.replicas.all())
    for pod in (cluster.store.get("pods", ns, p) for p in pods):
        lbls = pod["metadata"]["labels"]
        assert lbls[JOBSET_NAME] == "fit" and lbls[RJ_NAME] == lbls[manifests.LABEL_ROLE]
        assert pod["spec"]["subdomain"] == "fit" and pod["spec"]["hostname"].startswith(f"fit-{lbls[RJ_NAME]}-0-")
    # Logs are followed by pod name, as for any pod of ours.
    trainer_pod = job.replicas.get(role="trainer", index=1).pod
    assert trainer_pod.startswith("fit-trainer-0-1-")
    cluster.log(ns, trainer_pod, "pass 0 done")
    part.until(lambda: logstore.read(job.replicas.get(role="trainer", index=1)).text == "pass 0 done\n",
               what="the trainer's log")
    # The trainers succeed: the job does, and the JobSet controller deletes the pservers.
    for pod in pods:
        if "trainer" in pod:
            cluster.pod_succeeded(ns, pod)
    assert cluster.store.get("jobsets", ns, "fit")["status"]["terminalState"] == "Completed"
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded")
    assert all(r.state == ReplicaState.SUCCEEDED for r in job.replicas.filter(role="trainer"))
    assert not job.replicas.filter(role="pserver", state=ReplicaState.FAILED).exists()
    part.until(lambda: cluster.objects_in(ns) == [], what="everything gone with the root")


@pytest.mark.django_db(transaction=True)
def test_waiting_in_kueues_queue_never_times_out(alice, cluster, k8s_dc, part):
    use_gang(k8s_dc, **KUEUE, pending_timeout=1)
    job = submit(alice, "fit", mode="ps", pservers=2, trainers=2)
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    started_long_ago(job)
    cluster.store.update("jobsets", ns, "fit", lambda o: o["metadata"].update(creationTimestamp=now(-3600)))
    cluster.kueue_workload(ns, "fit", admitted=False, message="waiting for quota")
    part.until(lambda: part.job(job).reason == "KueueQueued", what="Kueue's reason")
    part.tick()
    assert part.job(job).state == JobState.STARTING, job.message


@pytest.mark.django_db(transaction=True)
def test_suspend_deletes_the_jobset_and_resume_and_a_gang_restart_make_a_new_one(alice, cluster, k8s_dc, part):
    job, ns = queued(alice, cluster, part, k8s_dc)
    admitted_and_running(cluster, part, job, ns)
    backend = get_backend(job.datacenter)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUSPENDED)
    job.refresh_from_db()
    backend.suspend(job)
    assert cluster.objects_in(ns) == [("configmaps", "fit"), ("networkpolicies", "fit-peers")], \
        "the JobSet, its Jobs, Service and pods are gone: Kueue gives its quota back"
    # Resume: a new attempt's JobSet, queued for Kueue again.
    Job.objects.filter(pk=job.pk).update(state=JobState.STARTING)
    job.refresh_from_db()
    attempts.new_attempt(list(job.replicas.all()), from_states=None)
    backend.launch(job)
    js = cluster.store.get("jobsets", ns, "fit-a1")
    assert js["spec"]["suspend"] is True and ("jobsets", "fit") not in cluster.objects_in(ns)
    assert job.replicas.get(role="pserver", index=0).host == f"fit-a1-pserver-0-0.fit-a1.{ns}.svc"
    admitted_and_running(cluster, part, job, ns, "fit-a1")
    # A gang restart, step by step (the watcher not ticked in between; the lifecycle's own is the
    # test_a_failed_pserver_restarts_the_whole_jobset_by_itself_...): every replica stopped, then the
    # next attempt started.
    backend.stop(job, list(job.replicas.all()))
    assert ("jobsets", "fit-a1") not in cluster.objects_in(ns)
    assert not cluster.store.find("pods", ns), "the old pods gone with it"
    attempts.new_attempt(list(job.replicas.all()), from_states=None)
    backend.restart(job, list(job.replicas.all()))
    env = cluster.store.get("jobsets", ns, "fit-a2")["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert f"fit-a2-pserver-0-0.fit-a2.{ns}.svc:" in env_of(env)["PADDLE_PSERVERS_IP_PORT_LIST"]
    pods = admitted_and_running(cluster, part, job, ns, "fit-a2")
    part.until(lambda: all(r.pod in pods and r.state == ReplicaState.RUNNING for r in part.job(job).replicas.all()),
               what="the new attempt's pods, never the old")


@pytest.mark.django_db(transaction=True)
def test_a_pserver_that_exits_fails_the_jobset_and_delete_leaves_nothing(alice, cluster, k8s_dc, part):
    from jobs.tasks import delete_job_task

    job, ns = queued(alice, cluster, part, k8s_dc)
    pods = admitted_and_running(cluster, part, job, ns)
    cluster.pod_failed(ns, next(p for p in pods if "pserver" in p), exit_code=137, reason="OOMKilled")
    assert cluster.store.get("jobsets", ns, "fit")["status"]["terminalState"] == "Failed"
    part.until(lambda: part.job(job).state == JobState.FAILED, what="Failed")
    assert job.reason == "ReplicaFailed" and "pserver-0" in job.message and "OOMKilled" in job.message, job.message
    Job.objects.filter(pk=job.pk).update(deleting=True)
    delete_job_task.run(job.pk)
    assert cluster.objects_in(ns) == []


@pytest.mark.django_db(transaction=True)
def test_a_failed_pserver_restarts_the_whole_jobset_by_itself_and_the_next_attempt_succeeds(
        alice, cluster, k8s_dc, part, settings):
    settings.RESTART_BACKOFF_SECONDS = 0.1
    job, ns = queued(alice, cluster, part, k8s_dc, restart_mode="gang", max_restarts=1)
    pods = admitted_and_running(cluster, part, job, ns)
    cluster.pod_failed(ns, next(p for p in pods if "pserver-0-1" in p), exit_code=1)
    # The watcher's own passes: the failed JobSet is deleted, then after the backoff the next
    # attempt's JobSet is created, suspended for Kueue to admit whole again.
    part.until(lambda: ("jobsets", "fit-a1") in cluster.objects_in(ns), what="the next attempt's JobSet")
    assert ("jobsets", "fit") not in cluster.objects_in(ns)
    assert cluster.store.get("jobsets", ns, "fit-a1")["spec"]["suspend"] is True
    assert part.job(job).restarts == 1
    restart = job.events.get(reason="Restarting")
    assert "pserver-1" in restart.message and "every replica restarts (1 of 1)" in restart.message, restart.message
    pods = admitted_and_running(cluster, part, job, ns, "fit-a1")
    for pod in pods:
        if "trainer" in pod:
            cluster.pod_succeeded(ns, pod)
    part.until(lambda: part.job(job).state == JobState.SUCCEEDED, what="Succeeded")
    assert {r.attempt for r in job.replicas.all()} == {1}
