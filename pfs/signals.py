"""When a job ends, what it wrote under its owner's home is counted (one walk of that home,
in the background)."""

from django.db import transaction


def job_event_saved(sender, instance, created, **kwargs):
    from jobs.models import TERMINAL_STATES

    if not created or instance.replica_id is not None or instance.state not in TERMINAL_STATES:
        return
    job = instance.job

    def enqueue():
        from .tasks import recompute_usage

        try:
            recompute_usage.delay(job.user_id, job.datacenter_id)
        except Exception:  # the broker is down: the periodic recompute catches up
            import logging

            logging.getLogger(__name__).warning("could not queue a usage recompute", exc_info=True)

    transaction.on_commit(enqueue)
