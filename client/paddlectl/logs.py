"""Reading and following a job's logs through GET jobs/<name>/logs/: each replica's, and the
runtime build's (`build`).

The server keeps every replica's log as an append-only file addressed by byte offset, and each
answer says where the next read continues (`next_offset`). Following is therefore a loop of
"read from where I stopped" per replica: after a dropped connection, or a server restart, the
follower asks again from the same offsets and gets exactly the lines it has not seen. It reads
again when the job's websocket says something happened (paddlectl.live), and every
`poll_interval` seconds where there is no websocket. Pushed log output that continues a replica's
offset exactly is printed as pushed, with no request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .errors import ConnectionFailed

if TYPE_CHECKING:
    from .api import API
    from .live import JobEvents  # websockets: imported by a follower only

TERMINAL_STATES = ("Succeeded", "Failed", "Killed")
BUILD = "build"  # the job's runtime build log (pip's output, the image build), beside the replicas'
BUILD_STATES = ("Queued", "Building")  # job states in which the build may still write
REPLICA_DONE = ("Succeeded", "Failed", "Terminated")
FULL_READ = 1 << 19  # a read this big may have stopped at the server's size limit: read on


@dataclass(frozen=True)
class LogLine:
    replica: str
    text: str  # without the trailing newline

    def __str__(self) -> str:
        return self.text


def replica_name(job: str, worker: str) -> str:
    """Accept `trainer-0`, `trainer0` and `<job>-trainer-0` for a worker."""
    if worker.startswith(job + "-"):
        worker = worker[len(job) + 1:]
    for role in ("trainer", "pserver"):
        if worker.startswith(role) and worker[len(role):].isdigit():
            return f"{role}-{worker[len(role):]}"
    return worker


class LogReader:
    """Yields LogLine objects; see Client.logs()."""

    def __init__(self, api: API, job: str, *, replica: str | None = None, lines: int | None = None,
                 follow: bool = False, poll_interval: float = 1.0, reconnect_for: float = 300.0,
                 on_job: Callable[[dict[str, Any]], None] | None = None):
        self.api, self.job = api, job
        self.replica = replica_name(job, replica) if replica else None
        self.lines, self.follow = lines, follow
        self.poll_interval, self.reconnect_for = poll_interval, reconnect_for
        self.on_job = on_job
        self.path = f"jobs/{quote(job, safe='')}/logs/"
        self.offsets: dict[str, int] = {}
        self._partial: dict[str, str] = {}
        self.job_state: dict[str, Any] | None = None

    # --- one request, retried across outages -----------------------------------------------
    def _call(self, fn: Callable[[], Any]) -> Any:
        if not self.follow:
            return fn()
        from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

        retrying = Retrying(stop=stop_after_delay(self.reconnect_for), reraise=True,
                            wait=wait_exponential(multiplier=0.5, max=10),
                            retry=retry_if_exception_type(ConnectionFailed))
        return retrying(fn)

    def _fetch(self, **params: Any) -> list[dict[str, Any]]:
        if self.replica:
            params["replica"] = self.replica
        return self._call(lambda: self.api.get(self.path, **params)) or []

    def _emit(self, chunk: dict[str, Any]) -> Iterator[LogLine]:
        name = chunk["replica"]
        self.offsets[name] = int(chunk["next_offset"])
        text = self._partial.pop(name, "") + (chunk.get("text") or "")
        if not text:
            return
        *complete, rest = text.split("\n")
        if rest:
            self._partial[name] = rest
        for line in complete:
            yield LogLine(name, line.rstrip("\r"))

    def _drain(self, name: str) -> Iterator[LogLine]:
        """Read replica `name` from its offset until nothing new is left."""
        while True:
            offset = self.offsets.get(name, 0)
            chunks = self._call(partial(self.api.get, self.path, replica=name, offset=offset)) or []
            read = 0
            for chunk in chunks:
                read = int(chunk["next_offset"]) - int(chunk["offset"])
                yield from self._emit(chunk)
            if read < FULL_READ:
                return

    def _flush(self) -> Iterator[LogLine]:
        for name in sorted(self._partial):
            yield LogLine(name, self._partial.pop(name))

    def __iter__(self) -> Iterator[LogLine]:
        # Listening starts before the first read, so nothing after it goes unnoticed.
        events = None
        if self.follow:
            from .live import JobEvents

            events = JobEvents(self.api, self.job).start()
        try:
            yield from self._read(events)
        finally:
            if events is not None:
                events.close()

    def _read(self, events: JobEvents | None) -> Iterator[LogLine]:
        first = self._fetch(lines=max(0, self.lines)) if self.lines is not None else self._fetch(offset=0)
        for chunk in first:
            yield from self._emit(chunk)
            if self.lines is None and int(chunk["next_offset"]) - int(chunk["offset"]) >= FULL_READ:
                yield from self._drain(chunk["replica"])
        if events is None:
            yield from self._flush()
            return
        yield from self._follow(events)

    def _pushed(self, events: JobEvents) -> tuple[list[LogLine], bool]:
        """The lines pushed since the last look, and whether to read over HTTP all the same:
        something other than log output came, or a push did not continue its replica's offset."""
        logs, read = events.take_logs()
        lines: list[LogLine] = []
        for message in logs:
            name = message.get("replica")
            if self.replica and name != self.replica:
                continue
            if name in self.offsets and int(message.get("next_offset", 0)) <= self.offsets[name]:
                continue  # already read over HTTP
            if name not in self.offsets or message.get("offset") != self.offsets[name]:
                read = True  # a gap (or a replica not read yet): the HTTP read fills it
                continue
            lines.extend(self._emit(message))
        return lines, read

    def _follow(self, events: JobEvents) -> Iterator[LogLine]:
        job_path = f"jobs/{quote(self.job, safe='')}/"
        last_pass = False
        while True:
            job = self._call(lambda: self.api.get(job_path))
            if self.on_job and (self.job_state is None or _summary(job) != _summary(self.job_state)):
                self.on_job(job)
            self.job_state = job
            # Not started (a pending replica, a queued job's build): nothing to read yet.
            started = [BUILD] if job["state"] != "Queued" else []
            started += [r["name"] for r in job.get("replicas", []) if r["state"] != "Pending"]
            for name in started:
                if not self.replica or name == self.replica:
                    yield from self._drain(name)
            if last_pass:
                yield from self._flush()
                return
            build_over = self.replica == BUILD and job["state"] not in BUILD_STATES
            if build_over or job["state"] in TERMINAL_STATES and all(
                    r["state"] in REPLICA_DONE or r["state"] == "Pending" for r in job.get("replicas", [])):
                # Read once more after a moment: output written just before the end still arrives.
                last_pass = True
                time.sleep(min(self.poll_interval, 0.5))
                continue
            while True:  # until something calls for a read over HTTP (or the poll is due)
                news = events.pause(self.poll_interval)
                lines, read = self._pushed(events)
                yield from lines
                if read or not news or not events.connected.is_set():
                    break


def _summary(job: dict[str, Any]) -> tuple[Any, ...]:
    return (job.get("state"), job.get("reason"),
            tuple((r.get("name"), r.get("state")) for r in job.get("replicas", [])))
