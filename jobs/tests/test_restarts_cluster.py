"""The restart policy over a backend that restarts failed replicas itself (Kubernetes'
backoffLimitPerIndex): the lifecycle records the cluster's restarts and never restarts a trainer
itself; and new attempts racing each other and observations. The cluster is a small in-test
backend whose observations the test sets."""

import pytest

from jobs import services
from jobs.backends import registry
from jobs.backends.base import ReplicaStatus
from jobs.lifecycle.sync import sync_job
from jobs.models import Job, ReplicaState
from jobs.state.attempts import new_attempt
from tests.support import make_package

from .observed_backend import CALLS, OBSERVED, ObservedBackend, register


class SelfRestartingCluster(ObservedBackend):
    restarts_replicas = True


@pytest.fixture
def running_job(alice, datacenter, monkeypatch):
    register(monkeypatch, "cluster", SelfRestartingCluster)
    pkg = make_package(alice, "c", {"train.py": ""})
    job = services.submit_job(alice, {"name": "c", "package": pkg, "entry": "python train.py", "mode": "collective",
                                      "trainers": 1, "max_restarts": 2})
    datacenter.backend = "cluster"
    datacenter.save()
    Job.objects.filter(pk=job.pk).update(state="Running")
    yield Job.objects.select_related("datacenter").get(pk=job.pk)
    registry.backend_class.cache_clear()


def test_restarts_by_the_cluster_are_counted_and_recorded_once_each(running_job):
    OBSERVED[("trainer", 0)] = ReplicaStatus(ReplicaState.RUNNING, pod="c-0", restarts=1, last_exit_code=3,
                                             last_message="Error")
    sync_job(running_job)
    sync_job(running_job)  # the same observation again: nothing new

    trainer = running_job.replicas.get()
    assert (trainer.state, trainer.restarts, trainer.attempt) == ("Running", 1, 0)
    [event] = running_job.events.filter(reason="Restarting")
    assert "restarted by the cluster (1 of 2): exit code 3 Error" in event.message
    assert CALLS == []  # the cluster restarts it, not the lifecycle
    running_job.refresh_from_db()
    assert running_job.state == "Running"


def test_a_replica_the_cluster_gave_up_on_fails_the_job(running_job):
    OBSERVED[("trainer", 0)] = ReplicaStatus(ReplicaState.FAILED, exit_code=3, reason="Error",
                                             message="exited with code 3", restarts=2, last_exit_code=3)
    sync_job(running_job)

    running_job.refresh_from_db()
    assert (running_job.state, running_job.reason) == ("Failed", "RestartLimit")
    assert "trainer-0 exited with code 3 after 2 restarts" in running_job.message
    assert running_job.replicas.get().restarts == 2
    assert ("restart", ["trainer-0"]) not in CALLS


def test_of_two_callers_making_a_new_attempt_one_does(running_job):
    running_job.replicas.update(state="Failed", exit_code=3)
    first, second = running_job.replicas.get(), running_job.replicas.get()  # the same stale view

    assert new_attempt([first], restart=True) == [first]
    assert new_attempt([second], restart=True) == []
    row = running_job.replicas.get()
    assert (row.state, row.attempt, row.restarts, row.exit_code) == ("Pending", 1, 1, None)


def test_an_observation_of_an_earlier_attempt_never_changes_the_new_one(running_job, monkeypatch):
    """A new attempt made while the backend was observing the old one (another caller)."""
    running_job.replicas.update(state="Running")

    def observe_racing_a_restart(self, job):
        new_attempt(list(job.replicas.all()), from_states=None)
        return {("trainer", 0): ReplicaStatus(ReplicaState.FAILED, exit_code=3, reason="Error")}

    monkeypatch.setattr(SelfRestartingCluster, "observe", observe_racing_a_restart)
    sync_job(running_job)

    row = running_job.replicas.get()
    assert (row.state, row.attempt, row.exit_code) == ("Pending", 1, None)
    running_job.refresh_from_db()
    assert running_job.state == "Running"
