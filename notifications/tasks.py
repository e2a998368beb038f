from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import transaction

from jobs.models import Job

from . import delivery, services
from .models import Delivery


def queue(delivery: Delivery) -> None:
    """Send it once the current transaction commits."""
    transaction.on_commit(lambda: deliver.delay(delivery.pk))


@shared_task(bind=True, max_retries=None)
def deliver(self: Any, delivery_id: int) -> None:
    """Send a webhook message, retried with exponential backoff (notifications.delivery.attempt
    counts the attempts and decides when to give up)."""
    wait = delivery.attempt(delivery_id)
    if wait is not None:
        raise self.retry(countdown=wait)


# smtplib's errors are OSErrors: a mail server that is down or refusing for now is tried again.
@shared_task(autoretry_for=(OSError,), retry_backoff=30, retry_backoff_max=3600, max_retries=8)
def send_job_email(job_id: int) -> None:
    job = Job.objects.select_related("user").filter(pk=job_id).first()
    if job is not None:
        services.send_job_email(job)


@shared_task
def housekeeping() -> None:
    """Queue again deliveries whose task was lost, and drop old log entries."""
    for delivery_id in delivery.stalled():
        deliver.delay(delivery_id)
    delivery.prune()
