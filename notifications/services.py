"""Webhooks and job-end e-mail: what a user asks to be told, and fanning a job's state change out
to it. Sending is the worker's (notifications/tasks.py, notifications/delivery.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import QuerySet
from django.urls import reverse

from jobs.models import Job, JobState

from .addresses import AddressRefused, check_url
from .models import SUBSCRIBABLE, Delivery, EmailPreference, Event, Webhook

if TYPE_CHECKING:
    from django.contrib.auth.models import User

EVENT_OF_STATE = {JobState.RUNNING: Event.STARTED, JobState.SUCCEEDED: Event.SUCCEEDED,
                  JobState.FAILED: Event.FAILED, JobState.KILLED: Event.KILLED}
MAX_WEBHOOKS = 20  # per user: each job change fans out to all of them
SECRET_MIN = 16
MESSAGE_MAX = 2000  # of a job's message in a payload or an e-mail (failure messages carry log lines)


def _clean_url(url: str) -> str:
    url = (url or "").strip()
    try:
        check_url(url)
    except AddressRefused as e:
        raise ValidationError({"url": [str(e)]}) from None
    return url


def _clean_events(events: Iterable[str]) -> list[str]:
    events = list(dict.fromkeys(events))
    unknown = [e for e in events if e not in SUBSCRIBABLE]
    if unknown:
        raise ValidationError({"events": [f"unknown event(s) {', '.join(map(str, unknown))}; "
                                          f"choose from {', '.join(SUBSCRIBABLE)}"]})
    if not events:
        raise ValidationError({"events": ["choose at least one of " + ", ".join(SUBSCRIBABLE)]})
    return events


def _clean(url: str | None, events: Iterable[str] | None,
           secret: str | None) -> tuple[str | None, list[str] | None]:
    """The checked URL and events (None where not given), every field's errors at once."""
    errors: dict[str, list[str]] = {}
    clean_url = clean_events = None
    try:
        clean_url = None if url is None else _clean_url(url)
    except ValidationError as e:
        errors.update(e.message_dict)
    try:
        clean_events = None if events is None else _clean_events(events)
    except ValidationError as e:
        errors.update(e.message_dict)
    if secret and len(secret) < SECRET_MIN:
        errors["secret"] = [f"use at least {SECRET_MIN} characters (or leave it empty to have one made)"]
    if errors:
        raise ValidationError(errors)
    return clean_url, clean_events


def webhooks_of(user: User) -> QuerySet[Webhook]:
    return Webhook.objects.filter(user=user)


def create_webhook(user: User, *, url: str, events: Iterable[str], secret: str = "") -> Webhook:
    """A new webhook; without a secret one is made (the caller shows it once)."""
    events = list(events)
    _clean(url, events, secret)
    with transaction.atomic():
        # Counted under the user's row lock so two requests at once cannot both take the last slot.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        if webhooks_of(user).count() >= MAX_WEBHOOKS:
            raise ValidationError({"url": [f"you already have {MAX_WEBHOOKS} webhooks; delete one first"]})
        return Webhook.objects.create(user=user, url=url.strip(), events=list(dict.fromkeys(events)),
                                      secret=secret or secrets.token_hex(32))


def update_webhook(webhook: Webhook, *, url: str | None = None, events: Iterable[str] | None = None,
                   active: bool | None = None, secret: str | None = None) -> Webhook:
    """Change what is given (a new secret replaces the old one at once); only a new URL is
    checked again, so a webhook whose host no longer resolves can still be turned off."""
    clean_url, clean_events = _clean(url, events, secret)
    webhook.url = clean_url or webhook.url
    webhook.events = clean_events or webhook.events
    webhook.secret = secret or webhook.secret
    if active is not None:
        webhook.active = active
    webhook.save(update_fields=["url", "events", "active", "secret"])
    return webhook


def delete_webhook(webhook: Webhook) -> None:
    webhook.delete()


def send_test(webhook: Webhook) -> Delivery:
    """A test message to the webhook, signed and retried like any (its receiver can tell it by
    its event, webhook.test); the caller queues it (notifications.tasks.queue)."""
    return Delivery.objects.create(webhook=webhook, event=Event.TEST, payload={
        "event": Event.TEST, "webhook": webhook.pk, "job": None,
        "message": "A test message from PaddleCloud: this webhook is set up."})


def redeliver(delivery: Delivery) -> Delivery:
    """A delivery's message again, as a new delivery (the old one stays in the log as it went);
    signed anew when it is sent; the caller queues it (notifications.tasks.queue)."""
    return Delivery.objects.create(webhook=delivery.webhook, event=delivery.event, payload=delivery.payload)


def job_name(delivery: Delivery) -> str:
    """The name of the job a delivery is about ("" for a test)."""
    job = delivery.payload.get("job") if isinstance(delivery.payload, dict) else None
    return str(job.get("name", "")) if isinstance(job, dict) else ""


def deliveries_of(user: User, webhook: Webhook | None = None) -> QuerySet[Delivery]:
    found = Delivery.objects.filter(webhook__user=user).select_related("webhook")
    return found.filter(webhook=webhook) if webhook else found


def email_on_job_end(user: User) -> bool:
    return EmailPreference.objects.filter(user=user, job_end=True).exists()


def set_email_on_job_end(user: User, enabled: bool) -> None:
    EmailPreference.objects.update_or_create(user=user, defaults={"job_end": enabled})


def job_payload(job: Job, event: str) -> dict[str, Any]:
    return {"event": event, "job": {
        "id": job.pk, "name": job.name, "state": job.state, "reason": job.reason,
        "message": job.message[:MESSAGE_MAX], "datacenter": job.datacenter.name,
        "started": job.started.isoformat() if job.started else None,
        "finished": job.finished.isoformat() if job.finished else None,
        "url": settings.SITE_URL.rstrip("/") + reverse("jobs:detail", kwargs={"name": job.name})}}


def messages_for(job: Job, state: str) -> tuple[list[Delivery], bool]:
    """What a job's new state calls for: one Delivery (created here) per subscribed webhook, and
    whether its owner is e-mailed (the job ended). Queueing them is the caller's
    (notifications/signals.py), once the state change is committed."""
    event = EVENT_OF_STATE.get(JobState(state))
    if event is None:
        return [], False
    deliveries = []
    hooks = [h for h in webhooks_of(job.user).filter(active=True).only("pk", "events") if event in h.events]
    if hooks:
        payload = job_payload(job, event)
        deliveries = [Delivery.objects.create(webhook=hook, event=event, payload={**payload, "webhook": hook.pk})
                      for hook in hooks]
    return deliveries, event != Event.STARTED and email_on_job_end(job.user) and bool(job.user.email)


def send_job_email(job: Job) -> None:
    name, state = " ".join(job.name.split()), job.state.lower()  # a header holds no line breaks
    url = job_payload(job, "")["job"]["url"]
    body = f"Your job {name} {state}: {job.reason}\n\n{job.message[:MESSAGE_MAX]}\n\n{url}\n"
    send_mail(f"[PaddleCloud] job {name} {state}", body, None, [job.user.email])
