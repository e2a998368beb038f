"""A job's replica statuses from what the watches saw (observe.observe_job), as a table: pure
facts in, statuses out, for each layout and gang scheduler. No database, no cluster."""

from datetime import UTC, datetime

import pytest

from jobs.backends.kubernetes import manifests
from jobs.backends.kubernetes.config import parse
from jobs.backends.kubernetes.gang import Gang, Kueue, Verdict, Volcano
from jobs.backends.kubernetes.layouts import JobSetLayout, Plain
from jobs.backends.kubernetes.observe import INDEX_FAILURES, JobFacts, Seen, observe_job
from jobs.backends.kubernetes.status import Warning  # noqa: A004 - Kubernetes' event type, named as Kubernetes names it

pytestmark = pytest.mark.unit

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-01-01T00:09:00Z"
SETTINGS = parse("k8s", {})
KUEUE = parse("k8s", {"gang_scheduler": "kueue", "kueue_queue": "q"})
PLAIN, VOLCANO = Plain(SETTINGS, Gang(SETTINGS)), Plain(SETTINGS, Volcano(SETTINGS))
JOBSET = JobSetLayout(KUEUE, Kueue(KUEUE))


def at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)


def facts(pservers=2, trainers=2, mode="ps", attempt=0, **kw) -> JobFacts:
    attempts = {(r, i): attempt for r, n in (("pserver", pservers), ("trainer", trainers)) for i in range(n)}
    return JobFacts(7, pservers, trainers, mode, attempts=attempts, **kw)


def pod(role, index, *, phase="Pending", attempt=0, created=T0, state=None, ready=False, deleting=None,
        scheduled=None, annotations=None, node="n1"):
    md = {"name": f"{role}-{index}-a{attempt}", "namespace": "ns", "creationTimestamp": created,
          "labels": {manifests.LABEL_JOB_ID: "7", manifests.LABEL_ROLE: role, manifests.LABEL_INDEX: str(index),
                     manifests.LABEL_ATTEMPT: str(attempt)}, "annotations": annotations or {}}
    if deleting:
        md["deletionTimestamp"] = deleting
    status = {"phase": phase, "conditions": []}
    if state is not None:
        status["containerStatuses"] = [{"name": manifests.CONTAINER, "state": state, "ready": ready,
                                        "restartCount": 0}]
    if scheduled is not None:
        status["conditions"].append({"type": "PodScheduled", "status": "False", "reason": scheduled[0],
                                     "message": scheduled[1]})
    return {"metadata": md, "spec": {"nodeName": node} if node else {}, "status": status}


def running(role, index, **kw):
    return pod(role, index, phase="Running", state={"running": {"startedAt": T0}}, ready=True, **kw)


def failed(role, index, code=3, **kw):
    return pod(role, index, phase="Failed", state={"terminated": {"exitCode": code, "reason": "Error",
                                                                  "finishedAt": T1}}, **kw)


def controller(name, created=T0, **status):
    return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": created}, "spec": {}, "status": status}


SSET = controller("fit-pserver", readyReplicas=1)
TRAINERS = controller("fit-trainer")
GATED = ("SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")

# (id, layout, facts, seen, {(role, index): (state, reason, blocked, queued, pending_since)} for the keys that matter,
#  and the keys that must have no status at all)
CASES = [
    ("pserver-job-trainers-wait-for-ready-pservers", PLAIN, facts(),
     Seen(live=[running("pserver", 0), pod("pserver", 1, state={"waiting": {"reason": "ContainerCreating"}})],
          controllers={"pserver": SSET, "trainer": None}),
     {("pserver", 0): ("Running", "Running", False, False, None),
      ("pserver", 1): ("Pending", "ContainerCreating", False, False, at(T0)),
      ("trainer", 1): ("Pending", "WaitingForPservers", True, False, at(T0))}, []),
    ("trainers-behind-queued-pservers-are-queued-too", JOBSET, facts(),
     Seen(live=[pod("pserver", 0, scheduled=GATED, node=None), pod("pserver", 1, scheduled=GATED, node=None)],
          controllers={"pserver": controller("fit-pserver-0", ready=0), "trainer": None},
          gang=Verdict(False, since=at(T1))),
     {("pserver", 0): ("Pending", "SchedulingGated", False, True, at(T1)),
      ("trainer", 0): ("Pending", "WaitingForPservers", False, True, at(T1))}, []),
    ("a-suspended-jobset-waits-for-kueue", JOBSET, facts(),
     Seen(controllers={"pserver": {**controller("fit-pserver-0"), "spec": {"suspend": True}}, "trainer": None},
          gang=Verdict(True, "KueueQueued", "Kueue: waiting for admission")),
     {(r, i): ("Pending", "KueueQueued", False, True, None) for r in ("pserver", "trainer") for i in (0, 1)}, []),
    ("the-clock-of-a-pod-starts-when-volcano-lets-the-gang-go", VOLCANO, facts(mode="collective", pservers=0),
     Seen(live=[pod("trainer", 0, created=T0, state={"waiting": {"reason": "ContainerCreating"}})],
          controllers={"trainer": TRAINERS}, gang=Verdict(False, since=at(T2))),
     {("trainer", 0): ("Pending", "ContainerCreating", False, False, at(T2))}, [("trainer", 1)]),
    ("image-pull-errors-block", PLAIN, facts(mode="collective", pservers=0),
     Seen(live=[pod("trainer", 0, state={"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}),
                pod("trainer", 1, scheduled=("Unschedulable", "0/3 nodes: Insufficient cpu"), node=None)],
          controllers={"trainer": TRAINERS}),
     {("trainer", 0): ("Pending", "ImagePullBackOff", True, False, at(T0)),
      ("trainer", 1): ("Pending", "Unschedulable", True, False, at(T0))}, []),
    ("a-failed-mount-shows-from-its-warning-event", PLAIN, facts(mode="collective", pservers=0, trainers=1),
     Seen(live=[pod("trainer", 0, state={"waiting": {"reason": "ContainerCreating"}})],
          controllers={"trainer": TRAINERS}, pod_warnings={"trainer-0-a0": Warning("FailedMount", "no route")}),
     {("trainer", 0): ("Pending", "FailedMount", True, False, at(T0))}, []),
    ("the-controller-refused-to-make-pods", PLAIN, facts(mode="collective", pservers=0, trainers=1),
     Seen(controllers={"trainer": TRAINERS},
          controller_warnings={"trainer": Warning("FailedCreate", "exceeded quota: paddlecloud-quota")}),
     {("trainer", 0): ("Pending", "FailedCreate", True, False, None)}, []),
    ("an-earlier-attempts-pods-never-count", PLAIN, facts(mode="collective", pservers=0, trainers=1, attempt=1),
     Seen(live=[failed("trainer", 0, attempt=0)], controllers={"trainer": None}), {}, [("trainer", 0)]),
    ("a-pod-deleted-under-a-live-job-is-replaced", PLAIN, facts(mode="collective", pservers=0, trainers=1),
     Seen(gone=[running("trainer", 0)], controllers={"trainer": TRAINERS}), {}, [("trainer", 0)]),
    ("a-pod-deleted-with-its-controller-ends", PLAIN, facts(mode="collective", pservers=0, trainers=1),
     Seen(gone=[running("trainer", 0)], controllers={"trainer": None}),
     {("trainer", 0): ("Terminated", "Deleted", False, False, None)}, []),
    ("an-ended-jobs-unfinished-replicas-end", PLAIN,
     facts(mode="collective", pservers=0, ended=True,
           unfinished={("trainer", 0): ("Running", "p0"), ("trainer", 1): ("Pending", "")}),
     Seen(), {("trainer", 0): ("Terminated", "Terminated", False, False, None),
              ("trainer", 1): ("Terminated", "NotStarted", False, False, None)}, []),
    ("a-failed-trainer-job-fails-its-trainers-without-pods", PLAIN, facts(mode="collective", pservers=0),
     Seen(controllers={"trainer": controller("fit-trainer", conditions=[
         {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff limit"}])}),
     {("trainer", 0): ("Failed", "BackoffLimitExceeded", False, False, None)}, []),
    ("a-trainer-retried-by-its-job-is-restarting", PLAIN, facts(mode="collective", pservers=0, retry_limit=2),
     Seen(live=[failed("trainer", 0, created=T0),
                pod("trainer", 0, created=T1, annotations={INDEX_FAILURES: "1"}, state={"waiting": {}})],
          controllers={"trainer": TRAINERS}),
     {("trainer", 0): ("Running", "Restarting", False, False, None)}, []),
    ("a-permanent-exit-code-is-not-retried", PLAIN,
     facts(mode="collective", pservers=0, retry_limit=2, permanent=frozenset({3})),
     Seen(live=[failed("trainer", 0)], controllers={"trainer": TRAINERS}),
     {("trainer", 0): ("Failed", "Error", False, False, None)}, []),
]


@pytest.mark.parametrize("layout, job, seen, want, absent", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_observation(layout, job, seen, want, absent):
    got = observe_job(layout, job, seen)
    for key, (state, reason, blocked, queued, since) in want.items():
        s = got[key]
        assert (s.state, s.reason, s.blocked, s.queued, s.pending_since) == (state, reason, blocked, queued, since), key
    for key in absent:
        assert key not in got


def test_a_trainers_retries_are_counted_with_the_exit_code_that_caused_them():
    job = facts(mode="collective", pservers=0, trainers=1, retry_limit=2)
    seen = Seen(live=[failed("trainer", 0, code=5, created=T0),
                      running("trainer", 0, created=T1, annotations={INDEX_FAILURES: "1"})],
                controllers={"trainer": TRAINERS})
    s = observe_job(PLAIN, job, seen)[("trainer", 0)]
    assert (s.state, s.restarts, s.last_exit_code) == ("Running", 1, 5)


def test_the_pservers_readiness_is_in_the_waiting_trainers_message():
    seen = Seen(controllers={"pserver": controller("fit-pserver-0", ready=1), "trainer": None})
    s = observe_job(JOBSET, facts(), seen)[("trainer", 0)]
    assert s.message == "trainers start when all 2 pservers are ready (1 ready)"
