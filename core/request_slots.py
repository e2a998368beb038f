"""At most a few HTTP requests of a web process running at once, the rest waiting their turn.

On SQLite the queries run inside the web process, and Python's sqlite3 steps each row of a result
with the GIL released. With 32 requests in their threads at once, every row of every query hands
the GIL to another thread and waits to get it back, and a job list took twice the web process's
CPU at 32 connections as one request at a time (docs/operating/performance.md). Letting only `slots`
requests in at once, the others waiting for a slot in the event loop (no thread, no CPU), keeps
that handoff rare.

A request that has held its slot for `lease` seconds gives it up and goes on: one that is slow or
blocked (a write waiting for SQLite's lock, a long download) keeps a slot that long at most, so
slow requests cannot stall the ones behind them. Nothing but HTTP waits: websockets have no slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .asgi_types import ASGIApp, Receive, Scope, Send

LEASE = 0.05  # seconds a request keeps its slot, at most


class RequestSlots:
    """ASGI wrapper: at most `slots` HTTP requests in `app` at once, each for `lease` seconds at most
    (`slots` 0: no limit). `waited` is told how long each request waited for its slot, in seconds."""

    def __init__(self, app: ASGIApp, slots: int, lease: float = LEASE,
                 waited: Callable[[float], None] | None = None) -> None:
        self.app, self.slots, self.lease, self.waited = app, slots, lease, waited
        self._loop: asyncio.AbstractEventLoop | None = None
        self._free: asyncio.Semaphore | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.slots <= 0:
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        free = self._semaphore(loop)
        came = loop.time()
        await free.acquire()  # cancelled while waiting: no slot was taken
        held = True

        def give_back() -> None:
            nonlocal held
            if held:
                held = False
                free.release()

        lease = loop.call_later(self.lease, give_back)
        try:
            if self.waited is not None:
                self.waited(loop.time() - came)
            await self.app(scope, receive, send)
        finally:
            lease.cancel()
            give_back()

    def _semaphore(self, loop: asyncio.AbstractEventLoop) -> asyncio.Semaphore:
        # One per event loop: a semaphore is bound to the loop it first waited in (the service has
        # one loop; the test suite runs its requests in many).
        if self._loop is not loop or self._free is None:
            self._loop, self._free = loop, asyncio.Semaphore(self.slots)
        return self._free
