"""A committed state change is published once as core.events.job_state_changed, and its receivers
(the queue, storage accounting, notifications) follow it without jobs naming them."""

import pytest

from core.events import job_state_changed
from jobs import services
from jobs.models import JobState
from jobs.state.transitions import transition
from tests.support import make_package

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice):
    pkg = make_package(alice, "fit", {"train.py": "print('hi')\n"})
    return services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py"})


@pytest.fixture
def heard():
    seen = []

    def hear(sender, job, state, ended, **kwargs):
        seen.append((job.pk, state, ended))

    job_state_changed.connect(hear, dispatch_uid="test-hear")
    yield seen
    job_state_changed.disconnect(dispatch_uid="test-hear")


def test_a_state_change_is_published_once_committed_and_says_whether_the_job_ended(job, heard,
                                                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as pending:
        assert transition(job, JobState.SUSPENDED, "Suspended")
    assert heard == []  # not before the commit
    for callback in pending:
        callback()
    with django_capture_on_commit_callbacks(execute=True):
        transition(job, JobState.KILLED, "Killed")
        transition(job, JobState.FAILED, "Failed")  # already ended: no change, nothing published
    assert heard == [(job.pk, JobState.SUSPENDED, False), (job.pk, JobState.KILLED, True)]


def test_a_failing_receiver_neither_fails_the_change_nor_stops_the_others(job, django_capture_on_commit_callbacks):
    heard = []

    def broken(**kwargs):
        raise RuntimeError("receiver bug")

    job_state_changed.connect(broken, dispatch_uid="test-broken")  # before the one that listens
    job_state_changed.connect(lambda job, state, **kw: heard.append(state), dispatch_uid="test-after", weak=False)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert transition(job, JobState.KILLED, "Killed")
    finally:
        job_state_changed.disconnect(dispatch_uid="test-broken")
        job_state_changed.disconnect(dispatch_uid="test-after")
    job.refresh_from_db()
    assert job.state == JobState.KILLED and heard == [JobState.KILLED]
