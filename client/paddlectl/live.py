"""Wake-ups from the server: a job's websocket (`ws/jobs/<name>/`) pushes its state changes and
new log output as they happen. A log push that continues a follower's offset exactly is used as
it is; anything else (a state change, a gap, a reconnect) makes the follower read over HTTP by
offset, so a push lost, or a server or proxy without websockets, costs latency and never a line."""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from websockets.exceptions import InvalidHandshake, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

if TYPE_CHECKING:
    from .api import API


LIVE_POLL = 15.0  # with the websocket up, reads happen on its pushes; this only bounds a lost one


class JobEvents:
    """Listens on a job's websocket in a thread; `pause()` returns early when something came."""

    def __init__(self, api: API, job: str, *, open_timeout: float = 3.0):
        self.url, self.headers = api.websocket(f"ws/jobs/{quote(job, safe='')}/")
        self.open_timeout = open_timeout
        # wss with the same client certificate / CA as the HTTP requests (None: the defaults).
        self.tls = api.tls if self.url.startswith("wss://") else None
        self.connected = threading.Event()
        self.settled = threading.Event()  # connected, or given up for now
        self._news = threading.Event()
        self._logs: deque[dict[str, Any]] = deque()  # pushed log messages not yet taken
        self._other = threading.Event()  # news other than log output came: read over HTTP
        self._stop = threading.Event()
        self._ws: ClientConnection | None = None
        self._thread = threading.Thread(target=self._run, name=f"paddlectl-events-{job}", daemon=True)

    def start(self) -> JobEvents:
        self._thread.start()
        self.settled.wait(self.open_timeout + 1)
        return self

    def __enter__(self) -> JobEvents:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pause(self, poll_interval: float, limit: float | None = None) -> bool:
        """Wait before the next read: until news, or `poll_interval` seconds (longer while the
        websocket is up, as its pushes say when to read), never past `limit`. True on news."""
        timeout = max(poll_interval, LIVE_POLL) if self.connected.is_set() else poll_interval
        news = self._news.wait(timeout if limit is None else max(0.0, min(timeout, limit)))
        self._news.clear()
        return news

    def take_logs(self) -> tuple[list[dict[str, Any]], bool]:
        """The log messages pushed since the last call, in order, and whether anything else came
        (a state change, a reconnect) that calls for a read over HTTP."""
        other = self._other.is_set()
        self._other.clear()
        logs = []
        while self._logs:
            logs.append(self._logs.popleft())
        return logs, other

    def close(self) -> None:
        self._stop.set()
        ws = self._ws
        if ws is not None:
            ws.close()
        self._thread.join(self.open_timeout + 1)

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                # ssl=None is websockets' default (a default context for wss://)
                with connect(self.url, additional_headers=self.headers, open_timeout=self.open_timeout,
                             ssl=self.tls) as ws:
                    self._ws = ws
                    self.connected.set()
                    self.settled.set()
                    delay = 1.0
                    for frame in ws:
                        self._took(frame)
                        self._news.set()
            except (InvalidHandshake, InvalidURI):
                break  # refused (no websockets there, or no access): HTTP polling alone
            except (OSError, TimeoutError, EOFError, WebSocketException):
                pass  # dropped or not reachable now: try again in a while
            finally:
                self._ws = None
                self.connected.clear()
            if not self._stop.is_set():
                self._other.set()  # reconnected streams may have missed pushes: read once
                self._news.set()
            self.settled.set()
            self._stop.wait(delay)
            delay = min(delay * 2, 30.0)
        self.settled.set()

    def _took(self, frame: str | bytes) -> None:
        try:
            message = json.loads(frame)
        except ValueError:
            message = None
        if isinstance(message, dict) and message.get("type") == "log":
            self._logs.append(message)
        else:
            self._other.set()
