"""What the lifecycle records of a backend's observation of a replica (jobs/lifecycle/sync.py,
`observed`), as a table: the replica as recorded and the status observed in, the fields to write
(or None: leave it as it is) out. No database: the replicas are unsaved model instances."""

from datetime import UTC, datetime

import pytest

from jobs.backends.base import ReplicaStatus
from jobs.lifecycle.sync import observed
from jobs.models import Replica, ReplicaState

pytestmark = pytest.mark.unit

T0, T1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
PENDING, RUNNING, SUCCEEDED, FAILED, TERMINATED = (ReplicaState.PENDING, ReplicaState.RUNNING, ReplicaState.SUCCEEDED,
                                                   ReplicaState.FAILED, ReplicaState.TERMINATED)


def replica(state=PENDING, **fields) -> Replica:
    return Replica(role="trainer", index=0, state=state, **fields)


def status(state, **fields) -> ReplicaStatus:
    return ReplicaStatus(state, **fields)


# (id, replica as recorded, status observed, job ended, job suspended, job's restarts, the fields written
# that matter here, or None)
CASES = [
    ("pending-starts-running", replica(), status(RUNNING, reason="Running", pod="p", host="n1", started=T0), False,
     False, 0, {"state": RUNNING, "reason": "Running", "pod": "p", "host": "n1", "started": T0, "restart_at": None}),
    ("running-exits-0", replica(RUNNING), status(SUCCEEDED, exit_code=0, reason="Completed", finished=T1), False,
     False, 0, {"state": SUCCEEDED, "exit_code": 0, "reason": "Completed", "finished": T1}),
    ("running-fails-with-its-code", replica(RUNNING), status(FAILED, exit_code=3, reason="Error"), False, False, 0,
     {"state": FAILED, "exit_code": 3, "reason": "Error"}),
    # A cluster deletes a failed job's pods: what is seen of them later never rewrites the end.
    ("failed-never-changes-again", replica(FAILED, exit_code=3), status(TERMINATED, reason="Terminated"), False,
     False, 0, None),
    ("succeeded-never-changes-again", replica(SUCCEEDED, exit_code=0), status(RUNNING), False, False, 0, None),
    ("terminated-never-changes-again", replica(TERMINATED), status(PENDING), True, False, 0, None),
    ("progress-never-goes-backwards", replica(RUNNING), status(PENDING, reason="ContainerCreating"), False, False, 0,
     None),
    ("still-pending-with-a-reason", replica(), status(PENDING, reason="Unschedulable", message="no cpu"), False, False,
     0, {"state": PENDING, "reason": "Unschedulable", "message": "no cpu"}),
    # Waiting out its restart's backoff: its own reason (BackOff, until when) stays...
    ("backoff-keeps-its-reason", replica(restart_at=T1, reason="BackOff"), status(PENDING), False, False, 0, None),
    # ...unless the backend says why it waits.
    ("backoff-with-a-backend-reason", replica(restart_at=T1, reason="BackOff"), status(PENDING, reason="Scheduling"),
     False, False, 0, {"state": PENDING, "reason": "Scheduling"}),
    ("started-clears-the-backoff", replica(restart_at=T1), status(RUNNING), False, False, 0,
     {"state": RUNNING, "restart_at": None}),
    ("never-started-before-the-job-ended", replica(), status(PENDING), True, False, 0,
     {"state": TERMINATED, "reason": "NotStarted", "message": "the job ended before it started"}),
    ("stopped-to-suspend", replica(RUNNING), status(TERMINATED, reason="Terminated"), False, True, 0,
     {"state": TERMINATED, "reason": "Suspended", "message": "stopped to suspend the job"}),
    ("not-started-when-suspended", replica(), status(PENDING), False, True, 0,
     {"state": TERMINATED, "reason": "Suspended"}),
    ("a-failure-while-suspending-stays-a-failure", replica(RUNNING), status(FAILED, exit_code=1), False, True, 0,
     {"state": FAILED, "exit_code": 1}),
    # Restarted in place (a crash-looping container): counted on top of the job's restarts, no new attempt.
    ("crash-restarts-counted", replica(RUNNING, restarts=1), status(RUNNING, crash_restarts=2), False, False, 1,
     {"state": RUNNING, "restarts": 3}),
    ("crash-restarts-already-counted", replica(RUNNING, restarts=3), status(RUNNING, crash_restarts=2), False, False,
     1, {"state": RUNNING}),
]


@pytest.mark.parametrize("recorded, seen, job_done, suspended, job_restarts, want",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_what_an_observation_records(recorded, seen, job_done, suspended, job_restarts, want):
    fields = observed(recorded, seen, job_done, suspended, job_restarts)
    if want is None:
        assert fields is None
        return
    assert fields is not None
    assert {k: fields[k] for k in want} == want
    if "restarts" not in want:
        assert "restarts" not in fields  # counted only when the backend restarted it again
    if "host" not in want:
        assert "host" not in fields  # an unknown host never erases the one recorded
