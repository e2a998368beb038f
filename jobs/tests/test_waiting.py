"""The lifecycle's one rule set for replicas waiting to start (jobs/lifecycle/waiting.py), over a
small in-test backend whose observations the test sets: the facts a backend reports (since when
a replica waits, blocked, queued) and its pending_timeout() decide, whatever the backend is."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.backends import registry
from jobs.backends.base import ReplicaStatus
from jobs.lifecycle.sync import sync_job
from jobs.models import Job, JobEvent, JobState, ReplicaState
from tests.support import make_package

from .observed_backend import CALLS, OBSERVED, ObservedBackend, register

TIMEOUT = {"seconds": 60}


class Facts(ObservedBackend):
    """Its pending timeout is TIMEOUT's."""

    def pending_timeout(self):
        return TIMEOUT["seconds"]


@pytest.fixture
def starting(alice, datacenter, monkeypatch):
    """A collective job of two trainers that began to start ten minutes ago."""
    register(monkeypatch, "facts", Facts)
    TIMEOUT["seconds"] = 60
    pkg = make_package(alice, "w", {"train.py": ""})
    job = services.submit_job(alice, {"name": "w", "package": pkg, "entry": "python train.py", "mode": "collective",
                                      "trainers": 2})
    datacenter.backend = "facts"
    datacenter.save()
    Job.objects.filter(pk=job.pk).update(state=JobState.STARTING, reason="Launching", message="starting the replicas")
    JobEvent.objects.create(job=job, state=JobState.STARTING, reason="Launching")
    JobEvent.objects.filter(job=job).update(created=timezone.now() - timedelta(minutes=10))
    yield Job.objects.select_related("datacenter").get(pk=job.pk)
    registry.backend_class.cache_clear()


def pending(reason="", message="", minutes_ago=None, **facts):
    since = timezone.now() - timedelta(minutes=minutes_ago) if minutes_ago is not None else None
    return ReplicaStatus(ReplicaState.PENDING, reason=reason, message=message, pending_since=since, **facts)


def sync(job) -> Job:
    sync_job(job)
    job.refresh_from_db()
    return job


def test_a_replica_blocked_past_the_pending_timeout_fails_the_job_with_its_reason(starting):
    OBSERVED.update({("trainer", 0): ReplicaStatus(ReplicaState.RUNNING, reason="Running"),
                     ("trainer", 1): pending("ImagePullBackOff", "no such image", minutes_ago=2, blocked=True)})
    job = sync(starting)
    assert (job.state, job.reason) == ("Failed", "ImagePullBackOff")
    assert job.message == "trainer-1 did not start within 60 s. ImagePullBackOff: no such image"
    assert CALLS == [("stop", "w")]


def test_a_replica_waiting_without_a_reason_times_out_as_pending_timeout(starting):
    OBSERVED.update({("trainer", 0): pending("ContainerCreating", minutes_ago=2),
                     ("trainer", 1): pending("ContainerCreating", minutes_ago=0)})
    job = sync(starting)
    assert (job.state, job.reason) == ("Failed", "PendingTimeout")


def test_the_clock_starts_at_the_latest_start_of_the_job_not_before(starting):
    """A resumed job starts again: its replicas' wait before the resume does not count."""
    JobEvent.objects.create(job=starting, state=JobState.STARTING, reason="Launching")
    OBSERVED.update({("trainer", 0): pending("Unschedulable", "no node", minutes_ago=120, blocked=True)})
    job = sync(starting)
    assert job.state == JobState.STARTING and job.reason == "Unschedulable"


def test_waiting_in_a_schedulers_queue_never_times_out_and_is_the_jobs_own_reason(starting):
    held = "Kueue: insufficient unused quota for cpu"
    OBSERVED.update({key: pending("KueueQueued", held, minutes_ago=600, queued=True)
                     for key in (("trainer", 0), ("trainer", 1))})
    for _ in range(3):
        job = sync(starting)
    assert (job.state, job.reason, job.message) == ("Starting", "KueueQueued", held)
    assert job.events.filter(reason="KueueQueued").count() == 1


def test_the_jobs_reason_stays_while_a_replica_still_waits_for_it(starting):
    """Replicas taking turns do not flip the job's reason; the message changes only when the
    replica it names no longer waits for it."""
    pull, no_node = ("ErrImagePull", "pull failed"), ("Unschedulable", "no node")
    for t0, t1, shown in ((pull, no_node, "trainer-0: pull failed"), (pull, pull, "trainer-0: pull failed"),
                          (no_node, pull, "trainer-1: pull failed")):
        OBSERVED.update({("trainer", 0): pending(*t0, minutes_ago=0, blocked=True),
                         ("trainer", 1): pending(*t1, minutes_ago=0, blocked=True)})
        job = sync(starting)
        assert (job.reason, job.message) == ("ErrImagePull", shown)
    OBSERVED.update({key: ReplicaStatus(ReplicaState.RUNNING, reason="Running") for key in OBSERVED})
    job = sync(starting)
    assert (job.state, job.reason) == ("Running", "Running")
    reasons = list(job.events.filter(replica=None).values_list("reason", flat=True))
    assert reasons[reasons.index("Launching") + 1:] == ["ErrImagePull", "ErrImagePull", "Running"]


def test_a_replica_waiting_for_others_gives_way_to_their_own_reason(starting):
    """Trainers waiting for pservers explain the job only while no pserver explains itself: the
    pserver's own block is the cause, whichever the job showed first."""
    behind = pending("WaitingForPservers", "trainers start when all 1 pservers are ready (0 ready)", minutes_ago=0,
                     blocked=True, behind_others=True)
    gated = pending("SchedulingGated", "scheduling gates", minutes_ago=0, blocked=True)
    for t0, t1, shown in ((behind, pending(minutes_ago=0), ("WaitingForPservers", f"trainer-0: {behind.message}")),
                          (behind, gated, ("SchedulingGated", "trainer-1: scheduling gates")),
                          (behind, pending(minutes_ago=0), ("WaitingForPservers", f"trainer-0: {behind.message}"))):
        OBSERVED.update({("trainer", 0): t0, ("trainer", 1): t1})
        job = sync(starting)
        assert (job.reason, job.message) == shown


def test_a_backend_without_a_pending_timeout_never_times_a_replica_out(starting):
    """The local backend's case: its launch starts every replica or fails the job."""
    TIMEOUT["seconds"] = None
    OBSERVED.update({("trainer", 0): pending(minutes_ago=600), ("trainer", 1): pending(minutes_ago=600)})
    job = sync(starting)
    assert (job.state, job.reason) == ("Starting", "Launching")


def test_trainers_that_ended_before_the_job_was_seen_running_date_its_start(starting):
    """Fast trainers end before any sync sees them all running: the job goes from Starting
    straight to Succeeded, and it ran from its first replica's start (not: never started)."""
    first = timezone.now() - timedelta(seconds=30)
    OBSERVED.update({
        ("trainer", 0): ReplicaStatus(ReplicaState.SUCCEEDED, exit_code=0, started=first + timedelta(seconds=1),
                                      finished=first + timedelta(seconds=5)),
        ("trainer", 1): ReplicaStatus(ReplicaState.SUCCEEDED, exit_code=0, started=first,
                                      finished=first + timedelta(seconds=6))})
    job = sync(starting)
    assert (job.state, job.started) == ("Succeeded", first)
    assert job.finished >= first


def test_a_job_failing_before_it_was_seen_running_dates_its_start_by_the_replicas_that_ran(starting):
    first = timezone.now() - timedelta(seconds=30)
    Job.objects.filter(pk=starting.pk).update(max_restarts=0)
    starting.max_restarts = 0
    OBSERVED.update({
        ("trainer", 0): ReplicaStatus(ReplicaState.FAILED, exit_code=1, reason="Error", started=first,
                                      finished=first + timedelta(seconds=2)),
        ("trainer", 1): ReplicaStatus(ReplicaState.RUNNING, started=first + timedelta(seconds=1))})
    job = sync(starting)
    assert (job.state, job.reason, job.started) == ("Failed", "ReplicaFailed", first)


def test_a_job_failing_before_any_replica_ran_has_no_start(starting):
    OBSERVED.update({("trainer", 0): pending("ImagePullBackOff", "no such image", minutes_ago=2, blocked=True),
                     ("trainer", 1): pending("ImagePullBackOff", "no such image", minutes_ago=2, blocked=True)})
    job = sync(starting)
    assert (job.state, job.started) == ("Failed", None)
