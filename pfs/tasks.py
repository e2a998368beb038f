from celery import shared_task
from django.contrib.auth import get_user_model

from accounts.models import Datacenter

from . import uploads, usage


@shared_task
def housekeeping() -> dict:
    """Periodic: drop abandoned uploads and recompute every home's usage (what jobs wrote
    directly to their home is counted here)."""
    removed = uploads.cleanup_stale()
    homes = usage.recompute_all()
    return {"uploads_removed": removed, "homes": homes}


@shared_task
def recompute_usage(user_id: int, datacenter_id: int) -> int:
    user = get_user_model().objects.get(pk=user_id)
    return usage.recompute(user, Datacenter.objects.only("id", "name").get(pk=datacenter_id))
