"""Starting a replica again: a new attempt (a restart after a failure, a gang restart, a resume).

The replica row is reset with ONE conditional UPDATE on the attempt it was read at, so of two
callers racing to start the same replica again exactly one wins, and an observation of the old
attempt can no longer change the row (jobs/lifecycle/sync.py applies observations per attempt).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

from django.db import transaction
from django.db.models import F

from ..models import REPLICA_DONE, JobEvent, Replica, ReplicaState


def new_attempt(replicas: Iterable[Replica], *, restart: bool = False, restart_at: datetime | None = None,
                reason: str = "", message: str = "",
                from_states: Collection[str] | None = REPLICA_DONE) -> list[Replica]:
    """Make each replica's next attempt: Pending, nothing observed yet, `attempt` + 1.

    Only replicas still at the attempt they were read at (and, unless `from_states` is None, in one
    of `from_states`) are reset; the others were started again by someone else. `restart` counts it
    in `Replica.restarts` (a resume does not); `restart_at` is when the lifecycle starts it (a
    backoff), None when the caller starts it itself (resume: launch()). With a `reason`, a Pending
    event on the replica says why. Returns the replicas this call reset, updated in place.
    """
    claimed = []
    with transaction.atomic():
        for r in replicas:
            rows = Replica.objects.filter(pk=r.pk, attempt=r.attempt)
            if from_states is not None:
                rows = rows.filter(state__in=from_states)
            fields = {"attempt": r.attempt + 1, "state": ReplicaState.PENDING, "reason": reason, "message": message,
                      "pod": "", "exit_code": None, "started": None, "finished": None, "restart_at": restart_at}
            if not rows.update(**fields, restarts=F("restarts") + int(restart)):
                continue
            for key, value in fields.items():
                setattr(r, key, value)
            r.restarts += int(restart)
            if reason:
                JobEvent.objects.create(job_id=r.job_id, replica=r, state=ReplicaState.PENDING, reason=reason,
                                        message=message)
            claimed.append(r)
    return claimed
