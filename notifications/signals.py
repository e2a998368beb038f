from typing import Any

from django.dispatch import receiver

from jobs.live.notify import state_changed

from . import services


@receiver(state_changed, dispatch_uid="notifications.job_state_changed")
def job_state_changed(sender: Any, job: Any, state: str, **kwargs: Any) -> None:
    services.job_state_changed(job, state)
