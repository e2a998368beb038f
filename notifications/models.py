from django.conf import settings
from django.db import models

from accounts.fields import EncryptedTextField


class Event(models.TextChoices):
    STARTED = "job.started", "Job started"
    SUCCEEDED = "job.succeeded", "Job succeeded"
    FAILED = "job.failed", "Job failed"
    KILLED = "job.killed", "Job killed"
    TEST = "webhook.test", "Test message"  # sent on request, to check a receiver; never subscribed to


# What a webhook may subscribe to: the jobs' events (a test is sent on request only).
SUBSCRIBABLE = [e for e in Event.values if e != Event.TEST]
SUBSCRIBABLE_CHOICES = [(value, label) for value, label in Event.choices if value != Event.TEST]


class Webhook(models.Model):
    """A URL of the user's that is POSTed a signed JSON message when one of their jobs reaches
    one of `events`."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=500)
    events = models.JSONField(default=list, help_text="the events sent: " + ", ".join(SUBSCRIBABLE))
    # The receiver checks each message's signature with it, so it is a credential: encrypted at rest.
    secret = EncryptedTextField(help_text="Signs every message (HMAC-SHA256); stored encrypted, shown once.")
    active = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.user}/{self.url}"


class Delivery(models.Model):
    """One message to one webhook and what became of it, attempt by attempt (the last one shown)."""

    class Status(models.TextChoices):
        PENDING = "pending"  # not sent yet, or waiting to be retried
        SUCCEEDED = "succeeded"
        FAILED = "failed"  # given up on

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=20, choices=Event.choices)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True, help_text="the last attempt's HTTP status")
    error = models.CharField(max_length=300, blank=True, help_text="why the last attempt failed")
    response = models.CharField(max_length=200, blank=True, help_text="the start of the last response's body")
    created = models.DateTimeField(auto_now_add=True)
    last_attempt = models.DateTimeField(null=True, blank=True)
    # Set while a worker is sending it (notifications.delivery.attempt), so only one does at a time.
    sending_until = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.event} to {self.webhook_id}: {self.status}"


class EmailPreference(models.Model):
    """Whether the user is e-mailed when one of their jobs ends (off unless they opt in)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="email_preference")
    job_end = models.BooleanField(default=False, help_text="e-mail me when one of my jobs succeeds, fails or is killed")

    def __str__(self) -> str:
        return f"{self.user}: job-end e-mail {'on' if self.job_end else 'off'}"
