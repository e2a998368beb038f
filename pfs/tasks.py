from typing import TypedDict

from celery import shared_task
from django.contrib.auth import get_user_model

from accounts.models import Datacenter

from . import uploads, usage


class Housekeeping(TypedDict):
    uploads_removed: int
    reservations_dropped: int
    homes: int


@shared_task
def housekeeping() -> Housekeeping:
    """Periodic: drop abandoned uploads and the reservations of writes whose process died, and
    recompute every home's usage (what jobs wrote directly to their home is counted here)."""
    removed = uploads.cleanup_stale()
    dropped = usage.drop_stale_reservations()
    homes = usage.recompute_all()
    return {"uploads_removed": removed, "reservations_dropped": dropped, "homes": homes}


@shared_task
def recompute_usage(user_id: int, datacenter_id: int) -> int:
    user = get_user_model().objects.get(pk=user_id)
    return usage.recompute(user, Datacenter.objects.only("id", "name").get(pk=datacenter_id))
