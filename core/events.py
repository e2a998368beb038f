"""Events an app publishes for the others to follow without importing it (Django signals).

`job_state_changed`: sent by jobs (jobs/state/transitions.py) once a job's state change is
committed, with `job` (the jobs.Job), `state` (its new state, a JobState value) and `ended` (True
for Succeeded, Failed and Killed: the job will not run again). Its receivers: queue admission
(jobs/signals.py), storage accounting (pfs/signals.py), webhooks and e-mail
(notifications/signals.py).
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

log = logging.getLogger(__name__)

job_state_changed = Signal()


def publish(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Tell the signal's receivers; one failing neither fails the sender nor stops the others."""
    for receiver, result in signal.send_robust(sender=sender, **kwargs):
        if isinstance(result, Exception):
            log.error("%s failed on %s", getattr(receiver, "__qualname__", receiver), kwargs,
                      exc_info=result)
