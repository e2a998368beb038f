"""Push job changes to the job's Channels group (live pages and followers subscribe there)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.dispatch import Signal

if TYPE_CHECKING:
    from ..models import Job

log = logging.getLogger(__name__)

# Sent with job= and state= once a job's state change is committed: what lies outside jobs (e.g.
# the notifications app's webhooks and e-mail) follows job states without jobs knowing of it.
state_changed = Signal()


def group(job_id: int) -> str:
    return f"job-{job_id}"


def send(job_id: int, message: dict[str, str | int]) -> None:
    """Best effort: a live view missing one push catches up on its next poll or reconnect."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group(job_id), message)
    except Exception:  # noqa: BLE001 - Redis hiccups must never fail a state change
        log.warning("could not push an update for job %s", job_id, exc_info=True)


def job_changed(job_id: int) -> None:
    send(job_id, {"type": "job.changed", "job": job_id})


def job_state_changed(job: Job, state: str) -> None:
    """Tell state_changed's receivers; one failing must neither fail the change nor stop the others."""
    for receiver, result in state_changed.send_robust(sender=type(job), job=job, state=state):
        if isinstance(result, Exception):
            log.error("%s failed on job %s becoming %s", receiver, job.pk, state, exc_info=result)


def log_data(job_id: int, replica: str, offset: int, text: str, next_offset: int) -> None:
    """New log output, encoded here once as the websocket message every viewer is sent as is:
    encoding it per viewer cost 100 times the work for 100 viewers."""
    send(job_id, {"type": "log.data", "json": json.dumps(
        {"type": "log", "replica": replica, "offset": offset, "text": text, "next_offset": next_offset})})


def log_notice(job_id: int, replica: str, notice: str) -> None:
    """Why a replica's log is not coming in (or "" once it is again)."""
    send(job_id, {"type": "log.notice", "replica": replica, "notice": notice})
