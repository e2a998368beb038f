"""Two passes that observed the same replica change (the watcher and the reconcile, or two
watchers) record it once: one event, whichever comes second changes nothing."""

from datetime import UTC, datetime

import pytest

from jobs.backends.base import ReplicaStatus
from jobs.lifecycle.sync import _apply
from jobs.models import JobEvent, Replica, ReplicaState
from tests.support import make_job

pytestmark = pytest.mark.django_db


def test_a_replica_seen_starting_by_two_passes_gets_one_running_event(alice, datacenter):
    job = make_job(alice, datacenter, state="Starting")
    Replica.objects.create(job=job, role="trainer", index=0, state=ReplicaState.PENDING)
    first, second = Replica.objects.get(job=job), Replica.objects.get(job=job)  # both read it Pending
    running = ReplicaStatus(ReplicaState.RUNNING, pod="42", host="127.0.0.1", started=datetime.now(UTC))
    assert _apply(first, running, job_done=False)
    assert not _apply(second, running, job_done=False)
    assert JobEvent.objects.filter(job=job, state=ReplicaState.RUNNING).count() == 1
