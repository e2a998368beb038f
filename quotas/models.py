from django.conf import settings
from django.db import models
from django.db.models import Q


class Quota(models.Model):
    """Per-user limits in a datacenter. A row with no user is the datacenter's default."""

    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE, related_name="quotas")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="quotas",
        help_text="Empty: the default for every user of this datacenter without a quota of their own.",
    )
    cpu_millicores = models.PositiveBigIntegerField(default=8000, help_text="Total CPU of running jobs, in millicores.")
    memory_bytes = models.PositiveBigIntegerField(default=32 * 2**30, help_text="Total memory of running jobs.")
    gpus = models.PositiveIntegerField(default=0, help_text="Total GPUs of running jobs.")
    max_running_jobs = models.PositiveIntegerField(default=5)
    max_queued_jobs = models.PositiveIntegerField(
        default=1000, help_text="Jobs waiting to start at once; further submissions are refused. Every pass of "
                                "the queue goes through all the datacenter's waiting jobs.")
    storage_bytes = models.PositiveBigIntegerField(default=100 * 2**30, help_text="Bytes in the user's PFS home.")
    max_priority = models.PositiveIntegerField(default=10,
                                               help_text="The highest priority the user's jobs may ask for.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["datacenter", "user"], name="quota_one_per_user"),
            models.UniqueConstraint(fields=["datacenter"], condition=Q(user=None), name="quota_one_default"),
        ]

    def __str__(self) -> str:
        return f"{self.datacenter}: {self.user or 'default'}"
