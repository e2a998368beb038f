from typing import Any

from django.dispatch import receiver

from core.events import job_state_changed

from . import services, tasks


@receiver(job_state_changed, dispatch_uid="notifications.job_state_changed")
def queue_messages(sender: Any, job: Any, state: str, **kwargs: Any) -> None:
    """Queue the webhook deliveries and the e-mail a job's new state calls for."""
    deliveries, email = services.messages_for(job, state)
    for delivery in deliveries:
        tasks.deliver.delay(delivery.pk)
    if email:
        tasks.send_job_email.delay(job.pk)
