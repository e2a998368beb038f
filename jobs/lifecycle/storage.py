"""What running jobs write to their user's home counts against the storage quota while they run.

Every STORAGE_CHECK_SECONDS the watch loop walks the home of each user with a starting or running
job (one walk per user and datacenter, pfs.usage.recompute), so the usage that uploads and
admission see is the true one, and a home over its quota stops that user's running jobs in the
datacenter with reason StorageQuota: writing on would only push it further over.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.contrib.auth import get_user_model

from accounts.models import Datacenter
from pfs import usage
from quotas.units import format_bytes

from ..backends import registry
from ..models import Job, JobState
from .restarts import fail

log = logging.getLogger(__name__)
RUNNING = (JobState.STARTING, JobState.RUNNING)


class StorageCheck:
    def __init__(self) -> None:
        self.last = -float("inf")

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last < settings.STORAGE_CHECK_SECONDS:
            return
        self.last = now
        pairs = set(Job.objects.filter(state__in=RUNNING).values_list("user_id", "datacenter_id"))
        for user_id, datacenter_id in pairs:
            try:
                check(user_id, datacenter_id)
            except Exception:  # one home's trouble must not stop the others' checks
                log.exception("storage check of user %s failed", user_id)


def check(user_id: int, datacenter_id: int) -> int:
    """Recount the home; stop the user's running jobs there if it is over quota. Returns the usage."""
    user = get_user_model().objects.get(pk=user_id)
    datacenter = Datacenter.objects.get(pk=datacenter_id)
    used = usage.recompute(user, datacenter)
    limit = usage.get_usage(user, datacenter).limit_bytes
    if used > limit:
        message = (f"your storage in {datacenter.name} holds {format_bytes(used)}, over its quota of "
                   f"{format_bytes(limit)}: stopped so that it does not grow further. Free some space and run it again")
        for job in Job.objects.filter(user=user, datacenter=datacenter, state__in=RUNNING).select_related("datacenter"):
            fail(job, registry.get_backend(job.datacenter), "StorageQuota", message)
    return used
