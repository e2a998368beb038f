"""When a job ends, what it wrote under its owner's home is counted (one walk of that home,
in the background)."""

import logging
from typing import Any

from django.dispatch import receiver

from core.events import job_state_changed

from .tasks import recompute_usage

log = logging.getLogger(__name__)


@receiver(job_state_changed, dispatch_uid="pfs-usage-on-job-end")
def count_what_the_job_wrote(sender: Any, job: Any, ended: bool, **kwargs: Any) -> None:
    if not ended:
        return
    try:
        recompute_usage.delay(job.user_id, job.datacenter_id)
    except Exception:  # the broker is down: the periodic recompute catches up
        log.warning("could not queue a usage recompute", exc_info=True)
