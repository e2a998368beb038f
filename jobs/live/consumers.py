"""Live job updates over a websocket: state changes and new log output, pushed by the watcher.

The client sends nothing; on connect it gets the current state, then pushes. Access is checked
on every subscribe: only the job's owner may join its group. The credentials that opened the
socket are checked again while pushes flow, at most every LIVE_RECHECK_SECONDS: a revoked token,
a logged-out session or a deactivated user closes it (code 4401)."""

import time
from collections.abc import Mapping
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from accounts.asgi import credentials_valid
from core.headers import header

from ..models import Job
from . import notify


class JobConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels has no types
    async def connect(self) -> None:
        user = self.scope.get("user")
        name = self.scope["url_route"]["kwargs"]["name"]
        job = await self._job(user, name)
        if job is None:
            await self.close(code=4403)
            return
        self.job_id = job.pk
        session = self.scope.get("session")
        self.credentials = (header(self.scope, b"authorization"), session.session_key if session else None)
        self.checked, self.withdrawn = time.monotonic(), False
        self.group = notify.group(job.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "job", "state": job.state, "reason": job.reason})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    @database_sync_to_async  # type: ignore[untyped-decorator]  # channels has no types
    def _job(self, user: Any, name: str) -> Job | None:
        if user is None or not user.is_authenticated:
            return None
        return Job.objects.filter(user=user, name=name, deleting=False).first()

    @database_sync_to_async  # type: ignore[untyped-decorator]  # as above
    def _state(self) -> Mapping[str, object] | None:
        return Job.objects.filter(pk=self.job_id).values("state", "reason").first()

    async def job_changed(self, event: dict[str, Any]) -> None:
        state = await self._state()
        if state:
            await self.send_json({"type": "job", **state})

    async def _withdrawn(self) -> bool:
        """Whether the socket's credentials no longer admit its user (then it is closed)."""
        if not self.withdrawn and time.monotonic() - self.checked >= settings.LIVE_RECHECK_SECONDS:
            self.withdrawn = not await database_sync_to_async(credentials_valid)(*self.credentials)
            self.checked = time.monotonic()
            if self.withdrawn:
                await self.close(code=4401)
        return self.withdrawn

    async def dispatch(self, message: dict[str, Any]) -> None:
        if not message["type"].startswith("websocket.") and await self._withdrawn():
            return  # a push to a socket whose credentials were withdrawn
        # Log output, the bulk of the pushes, needs no database: channels' dispatch would first
        # close stale database connections in a thread, a thread hop per message and viewer.
        if message["type"] == "log.data":
            await self.log_data(message)
        else:
            await super().dispatch(message)

    async def log_data(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["json"])  # encoded once by the pusher (notify.log_data)

    async def log_notice(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "log_notice", "replica": event["replica"], "notice": event["notice"]})
