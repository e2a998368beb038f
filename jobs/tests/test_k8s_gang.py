# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Gang scheduling handed to Volcano or Kueue (the datacenter's gang_scheduler): every manifest
variant valid against the Kubernetes schemas and the vendored CRDs, the objects made over HTTP,
and the scheduler's own reason on the job while it holds the pods back."""

import copy
import functools
import logging
from pathlib import Path

import jsonschema
import pytest
import yaml

from jobs.backends.kubernetes import gang, manifests
from jobs.backends.kubernetes.config import SettingsError, parse
from jobs.backends.kubernetes.layouts import layout_for
from jobs.backends.kubernetes.workloads import PodOptions
from jobs.backends.registry import get_backend
from jobs.models import JobState, ReplicaState

from .k8s_emulator import now
from .k8s_fixtures import FAST, cluster, k8s_dc, launch, ns_of, part, started_long_ago, submit  # noqa: F401
from .test_k8s_manifests import ROOT, make_job, validate

CRDS = Path(__file__).parent / "crds"
GANGS = [{"gang_scheduler": "volcano"}, {"gang_scheduler": "volcano", "volcano_queue": "research",
                                         "priority_class_name": "batch"},
         {"gang_scheduler": "kueue", "kueue_queue": "team-a"}]


def _strict(schema: dict) -> dict:
    """Unknown fields fail, as kubectl's strict validation would (the API server prunes them)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


@functools.cache
def crd_validator(filename: str, version: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((CRDS / filename).read_text())
    schema = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(_strict(copy.deepcopy(schema)))


def validate_podgroup(obj: dict) -> None:
    assert obj["apiVersion"] == "scheduling.volcano.sh/v1beta1" and obj["kind"] == "PodGroup"
    crd_validator("scheduling.volcano.sh_podgroups.yaml", "v1beta1").validate(obj)


def gang_manifests(job, settings, attempt, ns="paddle-alice-1234abcd"):
    """The attempt's objects as its layout makes them, marked by the gang add-on."""
    opts = PodOptions(manifests.image_for(job, settings), grace_seconds=10)
    return layout_for(settings).manifests(job, ns, manifests.owner_reference(ROOT), attempt, opts)


VOLCANOS = GANGS[:2]


@pytest.mark.django_db
@pytest.mark.parametrize(("config", "shape"), [
    pytest.param(config, shape, id=f"{cid}-{sid}")
    for cid, config in zip(["volcano", "volcano-queue"], VOLCANOS, strict=True)
    for sid, shape in [("ps", dict(mode="ps", pservers=2, trainers=3)),
                       ("collective", dict(mode="collective", pservers=0, trainers=4, gpu=2))]])
@pytest.mark.parametrize("policy", [dict(restart_mode="replica", max_restarts=None, permanent_exit_codes="2"),
                                    dict(restart_mode="gang", max_restarts=5, permanent_exit_codes="")],
                         ids=["replica", "gang"])
@pytest.mark.parametrize("attempt", [0, 37])
def test_volcano_manifests_are_schema_valid_and_gang_every_replica(alice, config, shape, policy, attempt):
    """Under Kueue every job is one JobSet: test_k8s_jobset.py."""
    settings = parse("k8s", {**FAST, **config})
    job = make_job(alice, **shape, **policy)
    objs = gang_manifests(job, settings, attempt)
    [group] = [o for o in objs if o["kind"] == "PodGroup"]
    validate_podgroup(group)
    for obj in objs:
        if obj["kind"] != "PodGroup":
            validate(obj)
        assert obj["metadata"]["labels"][manifests.LABEL_ATTEMPT] == str(attempt)
    made = [o for o in objs if o["kind"] in ("Job", "StatefulSet")]
    trainers = next(w for w in made if w["kind"] == "Job")["spec"]
    if policy["restart_mode"] == "replica":
        assert trainers["backoffLimitPerIndex"] == job.datacenter.default_max_restarts
        assert {"action": "FailIndex", "onExitCodes": {"containerName": "paddle", "operator": "In", "values": [2]}} \
            in trainers["podFailurePolicy"]["rules"]
    else:
        assert trainers["backoffLimitPerIndex"] == 0, "gang mode: the lifecycle restarts the whole job"
        assert [r["action"] for r in trainers["podFailurePolicy"]["rules"]] == ["Ignore"]
    assert trainers["maxFailedIndexes"] == 0 and "backoffLimit" not in trainers and "suspend" not in trainers
    assert group["spec"]["minMember"] == job.pservers + job.trainers
    cpu = 2000 * job.trainers + 500 * job.pservers
    mem = 4 * 2**30 * job.trainers + 2**30 * job.pservers
    assert group["spec"]["minResources"]["cpu"] == f"{cpu}m"
    assert group["spec"]["minResources"]["memory"] == str(mem)
    assert group["spec"]["minResources"].get("nvidia.com/gpu") == ("8" if job.gpu else None)
    assert group["spec"].get("queue") == config.get("volcano_queue")
    assert group["metadata"]["ownerReferences"][0]["uid"] == ROOT["metadata"]["uid"]
    for tpl in (w["spec"]["template"] for w in made):
        assert tpl["spec"]["schedulerName"] == "volcano"
        assert tpl["metadata"]["annotations"][gang.GROUP_ANNOTATION] == group["metadata"]["name"]
    assert objs.index(group) == 0, "the gang first: Volcano binds the pods that name it"
    # Each attempt's objects have their own names, and every name fits its limits.
    names = {o["metadata"]["name"] for o in objs}
    assert all(n.endswith(manifests.attempt_suffix(attempt)) for n in names)


@pytest.mark.django_db
def test_the_podgroup_schema_check_rejects_what_volcano_would(alice):
    settings = parse("k8s", {**FAST, "gang_scheduler": "volcano"})
    group = gang.podgroup(make_job(alice), settings, "ns", None)
    for broken in ({"minMember": "5"}, {"minResources": {"cpu": "lots"}}, {"minMembers": 5}):
        bad = copy.deepcopy(group)
        bad["spec"].update(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_podgroup(bad)


@pytest.mark.django_db
def test_attempt_names_stay_within_label_limits(alice):
    job = make_job(alice, name="a" * 40)
    attempts = (1, 35, 36, 1295, 1296, 36**3, 10**9)
    for attempt in attempts:
        # A StatefulSet's pods get "<name>-<revision hash of 10>" as a label value (63 at most).
        assert len(manifests.pserver_name(job, attempt)) + 11 <= 63
        assert len(f"{manifests.trainer_name(job, attempt)}-999") <= 63  # a trainer's host name
    assert len({manifests.pserver_name(job, attempt) for attempt in attempts}) == len(attempts)
    assert manifests.pserver_name(job, 1295) == f"{'a' * 40}-pserver-azz"
    assert manifests.attempt_suffix(0) == "" and manifests.attempt_suffix(36) == "-a10"


@pytest.mark.parametrize("config, error", [
    ({"gang_scheduler": "slurm"}, "gang_scheduler: one of none, volcano, kueue"),
    ({"gang_scheduler": "kueue"}, "kueue_queue: the name of the Kueue LocalQueue"),
    ({"gang_scheduler": "kueue", "kueue_queue": "Team A"}, "kueue_queue"),
    ({"kueue_queue": "team-a"}, "kueue_queue: only with gang_scheduler kueue"),
    ({"gang_scheduler": "kueue", "kueue_queue": "q", "volcano_queue": "x"}, "volcano_queue: only with"),
])
def test_gang_settings_are_checked_when_the_datacenter_is_saved(config, error):
    with pytest.raises(SettingsError, match=error):
        parse("k8s", config)


# --- over HTTP -------------------------------------------------------------------------------
def use_gang(dc, **config) -> None:
    dc.config = {**FAST, **config}
    dc.save()


@pytest.mark.django_db(transaction=True)
def test_volcano_gangs_the_whole_job_and_its_reason_is_shown_while_it_waits(alice, cluster, k8s_dc, part):
    use_gang(k8s_dc, gang_scheduler="volcano")
    job = submit(alice, "fit", mode="ps", pservers=2, trainers=2)
    launch(job)
    ns = ns_of(job)
    # Everything at once: Volcano binds all four pods or none, so trainers do not wait here.
    assert {("podgroups", "fit-gang"), ("statefulsets", "fit-pserver"), ("jobs", "fit-trainer")} \
        <= set(cluster.objects_in(ns))
    root = cluster.store.get("configmaps", ns, "fit")
    assert cluster.store.get("podgroups", ns, "fit-gang")["metadata"]["ownerReferences"][0]["uid"] == \
        root["metadata"]["uid"]
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    pods = cluster.run_statefulset(ns, "fit-pserver") + cluster.run_job(ns, "fit-trainer")
    why = "2/4 tasks in gang unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
    cluster.podgroup_status(ns, "fit-gang", "Pending", why)
    part.until(lambda: part.job(job).reason == "GangUnschedulable", what="Volcano's reason on the job")
    assert job.state == JobState.STARTING and why in job.message
    r = job.replicas.get(role="trainer", index=1)
    assert (r.state, r.reason) == (ReplicaState.PENDING, "GangUnschedulable") and why in r.message
    cluster.podgroup_status(ns, "fit-gang", "Running")
    for pod in pods:
        cluster.pod_running(ns, pod)
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
    assert job.reason == "Running"
    # Kill: the root's cascade takes the PodGroup too.
    get_backend(job.datacenter).stop(job)
    assert cluster.objects_in(ns) == []


@pytest.mark.django_db(transaction=True)
def test_kueue_admits_a_collective_job_as_one_jobset_and_its_reason_is_shown_while_queued(
        alice, cluster, k8s_dc, part):
    use_gang(k8s_dc, gang_scheduler="kueue", kueue_queue="team-a")
    job = submit(alice, "fit", mode="collective", pservers=0, trainers=2)
    launch(job)
    ns = ns_of(job)
    js = cluster.store.get("jobsets", ns, "fit")
    assert js["spec"]["suspend"] is True and [rj["name"] for rj in js["spec"]["replicatedJobs"]] == ["trainer"]
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    why = "couldn't assign flavors to pod set trainer: insufficient unused quota for cpu in flavor default"
    cluster.kueue_workload(ns, "fit", admitted=False, message=why)
    part.until(lambda: part.job(job).reason == "KueueQueued" and why in job.message, what="Kueue's reason on the job")
    assert job.state == JobState.STARTING
    cluster.kueue_workload(ns, "fit", admitted=True)
    assert cluster.store.get("jobs", ns, "fit-trainer-0")["spec"]["suspend"] is False
    cluster.start_jobset(ns, "fit")
    part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")


@pytest.mark.django_db(transaction=True)
def test_waiting_for_the_gang_scheduler_never_times_out_and_the_clock_starts_when_released(
        alice, cluster, k8s_dc, part):
    use_gang(k8s_dc, gang_scheduler="volcano")
    job = submit(alice, "fit", mode="collective", pservers=0, trainers=2)
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    pods = cluster.run_job(ns, "fit-trainer")
    cluster.podgroup_status(ns, "fit-gang", "Inqueue", "1/2 tasks in gang unschedulable: 2 Insufficient nvidia.com/gpu")
    part.until(lambda: part.job(job).reason == "GangUnschedulable", what="Volcano's reason")
    # Launched and made an hour ago, far past pending_timeout (30 s here), held by Volcano since.
    started_long_ago(job)
    for pod in pods:
        cluster.store.update("pods", ns, pod, lambda o: o["metadata"].update(creationTimestamp=now(-3600)))
    part.until(lambda: all(r.reason == "GangUnschedulable" for r in job.replicas.all()), what="pods seen, held")
    for _ in range(3):
        part.tick()
    assert part.job(job).state == JobState.STARTING, job.message
    cluster.podgroup_status(ns, "fit-gang", "Running")
    for pod in pods:
        cluster.pod_waiting(ns, pod, "ContainerCreating")
    part.until(lambda: all(r.reason == "ContainerCreating" for r in job.replicas.all()), what="pods bound")
    part.tick()
    assert part.job(job).state == JobState.STARTING, job.message


@pytest.mark.django_db(transaction=True)
def test_kueue_gated_pods_of_an_admitted_jobset_show_why_and_do_not_time_out(alice, cluster, k8s_dc, part):
    use_gang(k8s_dc, gang_scheduler="kueue", kueue_queue="team-a", pending_timeout=5)
    job = submit(alice, "fit", mode="ps", pservers=2, trainers=2)
    launch(job)
    ns = ns_of(job)
    js = cluster.store.get("jobsets", ns, "fit")
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and js["spec"]["suspend"] is True
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    started_long_ago(job)
    cluster.kueue_workload(ns, "fit", admitted=True)
    # Admitted, but Kueue still gates the pods (e.g. while it assigns their topology).
    gated = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                                 "message": "Scheduling is blocked due to non-empty scheduling gates"}]}
    for pod in cluster.run_jobset(ns, "fit"):
        cluster.store.update("pods", ns, pod, lambda o: (o["metadata"].update(creationTimestamp=now(-3600)),
                                                         o.update(status=gated)))
    part.until(lambda: part.job(job).reason == "SchedulingGated", what="the gate on the job")
    for _ in range(3):
        part.tick()
    assert part.job(job).state == JobState.STARTING and "scheduling gates" in job.message


@pytest.mark.django_db(transaction=True)
def test_without_kueue_on_the_cluster_the_job_waits_for_admission_and_says_so_once(
        alice, cluster, k8s_dc, part, caplog, monkeypatch):
    from jobs.backends.kubernetes import informer

    monkeypatch.setattr(informer, "ABSENT_RECHECK_SECONDS", 0.2, raising=False)
    cluster.uninstall("kueue.x-k8s.io")
    use_gang(k8s_dc, gang_scheduler="kueue", kueue_queue="team-a")
    job = submit(alice, "fit", mode="ps", pservers=2, trainers=2)
    launch(job)
    with caplog.at_level(logging.INFO, logger="jobs.backends.kubernetes"):
        part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
        part.until(lambda: part.job(job).reason == "KueueQueued", what="the wait for Kueue on the job")
        part.until(lambda: sum("/workloads" in p for _, _, p in cluster.requests) >= 3, what="Workloads asked again")
        for _ in range(3):
            part.tick()
    assert job.state == JobState.STARTING and "Kueue" in job.message and "installed" in job.message, job.message
    assert not any(r.name in job.message for r in job.replicas.all()), "a reason of the job's, not of a replica"
    assert all((r.state, r.reason) == (ReplicaState.PENDING, "KueueQueued") for r in job.replicas.all())
    assert job.events.filter(reason="KueueQueued").count() == 1
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "kueue.x-k8s.io" in said[0].getMessage() and not said[0].exc_info, said


@pytest.mark.django_db(transaction=True)
def test_the_jobs_reason_under_a_gang_scheduler_is_the_schedulers_and_recorded_once(alice, cluster, k8s_dc, part):
    """Replicas whose pods appear one by one, all held by Volcano: the job's reason and message
    stay Volcano's own, whichever replica carries them, and are one event."""
    use_gang(k8s_dc, gang_scheduler="volcano")
    job = submit(alice, "fit", mode="ps", pservers=2, trainers=2)
    launch(job)
    ns = ns_of(job)
    part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="the watches to sync")
    why = "3/4 tasks in gang unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
    cluster.podgroup_status(ns, "fit-gang", "Pending", why)
    part.until(lambda: part.job(job).reason == "GangUnschedulable", what="Volcano's reason on the job")
    for pod in cluster.run_job(ns, "fit-trainer") + cluster.run_statefulset(ns, "fit-pserver"):
        cluster.pod_unschedulable(ns, pod, "0/3 nodes are available: 3 Insufficient cpu.")
        for _ in range(2):
            part.tick()
    assert (job.reason, job.message) == ("GangUnschedulable", f"Volcano: {why}")
    reasons = list(job.events.filter(replica=None).order_by("created", "pk").values_list("reason", flat=True))
    assert reasons[reasons.index("Launching") + 1:] == ["GangUnschedulable"]
