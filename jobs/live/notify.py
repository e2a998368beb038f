"""Push job changes to the job's Channels group (live pages and followers subscribe there)."""

from __future__ import annotations

import json
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def group(job_id: int) -> str:
    return f"job-{job_id}"


def send(job_id: int, message: dict[str, str | int]) -> None:
    """Best effort: a live view missing one push catches up on its next poll or reconnect."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group(job_id), message)
    except Exception:  # Redis hiccups must never fail a state change
        log.warning("could not push an update for job %s", job_id, exc_info=True)


def job_changed(job_id: int) -> None:
    send(job_id, {"type": "job.changed", "job": job_id})


def log_data(job_id: int, replica: str, offset: int, text: str, next_offset: int) -> None:
    """New log output, encoded here once as the websocket message every viewer is sent as is:
    encoding it per viewer cost 100 times the work for 100 viewers."""
    send(job_id, {"type": "log.data", "json": json.dumps(
        {"type": "log", "replica": replica, "offset": offset, "text": text, "next_offset": next_offset})})


def log_notice(job_id: int, replica: str, notice: str) -> None:
    """Why a replica's log is not coming in (or "" once it is again)."""
    send(job_id, {"type": "log.notice", "replica": replica, "notice": notice})
