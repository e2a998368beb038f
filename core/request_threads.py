"""Each HTTP request's sync code in one thread that is the request's alone, kept for later requests
instead of started anew for each.

Django's ASGI handler runs a request's thread-sensitive sync code (the request signals, the
middleware chain and view, the response's close) in one thread made for that request: asgiref's
ThreadSensitiveContext makes a ThreadPoolExecutor per request, whose thread starts on the first
call and is joined, from yet another new thread, when the request ends; and the request's
database connection, thread-local, is taken from the pool afresh in each new thread. At 32
connections that was about a fifth of a job detail's CPU (bench/web.py). Here an outer ThreadSensitiveContext hands
the request an executor of one long-lived thread, the request's alone until it ends (asgiref's
documented `ThreadSensitiveContext(executor=...)`, meant for such a pool); the inner contexts,
Django's and pfs/legacy's, then change nothing, as only the outermost one chooses. So the
guarantee stays Django's: all of a request's sync code in one thread, and no other request's
code in that thread meanwhile.

No request waits for a thread: with none idle, a new one is made. A thread idle for
`idle_seconds` is ended (so is any beyond `max_idle`), and so is one whose request did not end
cleanly (an exception or a cancellation may leave a call of it still queued in its thread).
What a thread holds for later requests (Django's database connection, kept on SQLite:
paddleweb/settings.py) is let go by `on_end`, which runs in the thread as its last call.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext

from .asgi_types import ASGIApp, Receive, Scope, Send

IDLE_SECONDS = 60.0  # an idle thread is ended after this long
MAX_IDLE = 64  # idle threads kept after a burst, at most


class ThreadPerRequest:
    """ASGI wrapper: each HTTP request's thread-sensitive sync code runs in one reused thread."""

    def __init__(self, app: ASGIApp, idle_seconds: float = IDLE_SECONDS, max_idle: int = MAX_IDLE,
                 clock: Callable[[], float] = time.monotonic, on_end: Callable[[], None] | None = None) -> None:
        self.app = app
        self.on_end = on_end
        self.idle_seconds, self.max_idle, self.clock = idle_seconds, max_idle, clock
        self._idle: deque[tuple[float, ThreadPoolExecutor]] = deque()  # oldest first; the newest is reused
        self.started = 0  # threads made so far
        self.busy = 0  # requests in flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        executor = self._take()
        clean = False
        self.busy += 1
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
            clean = True
        finally:
            self.busy -= 1
            self._give(executor, clean)

    @property
    def idle(self) -> int:
        """Threads now waiting for a request."""
        return len(self._idle)

    def _take(self) -> ThreadPoolExecutor:
        if self._idle:
            return self._idle.pop()[1]
        self.started += 1
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def _give(self, executor: ThreadPoolExecutor, clean: bool) -> None:
        now = self.clock()
        if clean:
            self._idle.append((now, executor))
        else:
            self._end(executor)
        idle = self._idle
        while idle and (len(idle) > self.max_idle or now - idle[0][0] > self.idle_seconds):
            self._end(idle.popleft()[1])

    def end_idle(self) -> None:
        """End every idle thread now, and wait until they have: the test suite does after each test,
        whose database (and pytest-django's guard on it) a later test's threads must not carry."""
        while self._idle:
            self._end(self._idle.popleft()[1], wait=True)

    def _end(self, executor: ThreadPoolExecutor, wait: bool = False) -> None:
        if self.on_end is not None:
            executor.submit(self.on_end)  # after whatever a request that failed left queued
        executor.shutdown(wait=wait)
