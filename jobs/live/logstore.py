"""Durable job logs: one append-only file per replica, and one for the job's runtime build,
addressed by byte offset.

Offsets only grow, so a viewer that remembers the last offset it saw resumes without losing or
repeating a line. The local backend's process keeper appends to these files directly; the
Kubernetes backend's collector appends what it reads from pods. The `build` log holds the runtime
build's output (pip, the image build): backends append to `build_log_path(job)` and it is read,
followed and kept exactly like a replica's. Logs outlive the processes and pods, until the job is
deleted.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from django.conf import settings

from launcher import fdtree

if TYPE_CHECKING:
    from ..models import Job

MAX_READ = 1 << 20
# Bounds of what a reader may ask for: a byte offset any file can have, and a tail length.
MAX_LOG_OFFSET = (1 << 62) - 1
MAX_LOG_LINES = 100_000
# How far back tail reads at most: a log can be one line of gigabytes (a sparse file, no newline).
# A few lines (the watcher's failure messages) read at most the first; a long tail, 256 bytes a
# line, up to the second.
MAX_TAIL_BYTES, MAX_LONG_TAIL_BYTES = 4 * MAX_READ, 64 * MAX_READ
# The most of one line search holds and searches; the rest of a longer line is read past, not held.
MAX_SEARCH_LINE = 64 * 1024


@dataclass(frozen=True)
class LogChunk:
    text: str
    offset: int  # where `text` starts
    next_offset: int  # where the next read continues
    notice: str = ""  # why lines may be missing (the collector cannot read the pod's log), if so


# The job-level log of the runtime build: a name no replica can have (replicas are <role>-<index>).
BUILD = "build"


class LogSource(Protocol):
    """One log of a job: a Replica, or the job's BuildLog."""

    @property
    def job_id(self) -> int: ...

    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class BuildLog:
    job_id: int
    name: str = BUILD


def job_dir(job_id: int) -> Path:
    return settings.LOGS_ROOT / str(job_id)


def path(replica: LogSource) -> Path:
    return job_dir(replica.job_id) / f"{replica.name}.log"


def build_log(job: Job | int) -> BuildLog:
    """The job's build log, readable with read/tail/size like a replica's."""
    return BuildLog(job if isinstance(job, int) else job.pk)


def build_log_path(job: Job | int) -> Path:
    """Where a backend appends the runtime build's output (raw bytes, never rewritten)."""
    return path(build_log(job))


def open_build_log(job: Job | int) -> BinaryIO:
    """The build log opened for appending (its directory made): a file whose descriptor can be
    handed to the process that runs the build."""
    p = build_log_path(job)
    p.parent.mkdir(parents=True, exist_ok=True)
    return open(p, "ab")


def append_build(job: Job | int, data: bytes) -> int:
    """Append to the job's build log; returns the new end offset."""
    return append(build_log(job), data)


def size(replica: LogSource) -> int:
    try:
        return path(replica).stat().st_size
    except FileNotFoundError:
        return 0


def append(replica: LogSource, data: bytes) -> int:
    """Append raw bytes (from a log collector); returns the new end offset."""
    p = path(replica)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "ab") as f:
        f.write(data)
        return f.tell()


def read(replica: LogSource, offset: int = 0, limit: int = MAX_READ) -> LogChunk:
    """Bytes from `offset`, ending on a line boundary unless one line alone exceeds `limit`."""
    if not 0 <= offset <= MAX_LOG_OFFSET:
        raise ValueError(f"offset must be between 0 and {MAX_LOG_OFFSET}")
    try:
        with open(path(replica), "rb") as f:
            f.seek(offset)
            data = f.read(limit)
    except FileNotFoundError:
        return LogChunk("", offset, offset)
    if len(data) == limit and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    return LogChunk(data.decode("utf-8", "replace"), offset, offset + len(data))


def recent_line_start(replica: LogSource, window: int) -> int:
    """Where the first whole line within the log's last `window` bytes begins (0 if the log is no
    longer than that; its end if no line starts there)."""
    try:
        with open(path(replica), "rb") as f:
            end = f.seek(0, os.SEEK_END)
            if end <= window:
                return 0
            f.seek(end - window - 1)  # and the byte before: a line may start right at the window
            data = f.read(window + 1)
    except FileNotFoundError:
        return 0
    cut = data.find(b"\n")
    return end if cut < 0 else end - window + cut


def tail(replica: LogSource, lines: int) -> LogChunk:
    """The last `lines` complete lines (plus a trailing partial one), read backwards in blocks."""
    if not 0 <= lines <= MAX_LOG_LINES:
        raise ValueError(f"lines must be between 0 and {MAX_LOG_LINES}")
    try:
        f = open(path(replica), "rb")  # noqa: SIM115 - apart from `with`: only the open's FileNotFoundError is caught
    except FileNotFoundError:
        return LogChunk("", 0, 0)
    with f:
        end = f.seek(0, os.SEEK_END)
        # Blocks are kept apart and joined once, and only each new block's newlines are counted:
        # re-joining and re-counting all read so far per block is quadratic in what is read.
        start, newlines = end, 0
        blocks: list[bytes] = []  # last block first
        most = min(MAX_LONG_TAIL_BYTES, max(MAX_TAIL_BYTES, 256 * lines))
        while start > 0 and newlines <= lines and end - start < most:
            step = min(65536, start)
            start -= step
            f.seek(start)
            block = f.read(step)
            blocks.append(block)
            newlines += block.count(b"\n")
        data = b"".join(reversed(blocks))
    del blocks
    # The last lines start after the `lines`-th newline back (a final newline starts no line),
    # found in place rather than by splitting and joining copies of what was read.
    first = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(lines):
        first = data.rfind(b"\n", 0, first)
        if first < 0:
            break
    first = min(first + 1, len(data))
    return LogChunk(str(memoryview(data)[first:], "utf-8", "replace"), end - (len(data) - first), end)


def _notice_path(replica: LogSource) -> Path:
    return path(replica).with_suffix(".notice")


def notice(replica: LogSource) -> str:
    """Why the replica's log may be missing lines right now (its collector cannot read it), or ""."""
    try:
        return _notice_path(replica).read_text()
    except FileNotFoundError:
        return ""


def set_notice(replica: LogSource, text: str) -> None:
    """Say (or with "", stop saying) why the log may be incomplete; viewers show it beside the log."""
    p = _notice_path(replica)
    if not text:
        p.unlink(missing_ok=True)
        return
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".notice.tmp")
    tmp.write_text(text)
    os.replace(tmp, p)


def delete_job(job_id: int) -> None:
    fdtree.rmtree(job_dir(job_id))


# --- when lines were written ----------------------------------------------------------------
# The watch loop's follower (logfollow.py) reads every log as it grows and records, at most once a
# TIME_MARK_EVERY, "offset seconds": every byte before `offset` had been written by then. A line
# gets the time of the first mark past its start: when it was seen, to the follower's latency.


def _times_path(source: LogSource) -> Path:
    return path(source).with_suffix(".times")


def mark_time(source: LogSource, offset: int, at: float) -> None:
    p = _times_path(source)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as f:
        f.write(f"{offset} {at:.3f}\n")


def times(source: LogSource) -> tuple[list[int], list[float]]:
    """The marks, by offset: (offsets, seconds), both ascending."""
    offsets: list[int] = []
    seconds: list[float] = []
    try:
        with open(_times_path(source)) as f:
            for row in f:
                offset, _, at = row.partition(" ")
                try:
                    offsets.append(int(offset))
                    seconds.append(float(at))
                except ValueError:
                    continue  # a mark half-written when the watcher stopped
    except FileNotFoundError:
        pass
    return offsets, seconds


def timed_lines(source: LogSource, chunk: LogChunk) -> list[tuple[str, float | None]]:
    """The lines of `chunk` (read again as bytes: offsets count bytes), each with when it was
    written (None: not seen by the follower yet)."""
    offsets, seconds = times(source)
    try:
        with open(path(source), "rb") as f:
            f.seek(chunk.offset)
            raw = f.read(chunk.next_offset - chunk.offset)
    except FileNotFoundError:
        raw = b""
    out: list[tuple[str, float | None]] = []
    start = chunk.offset
    for line in raw.split(b"\n"):
        if not line and start >= chunk.next_offset:
            break  # after the last newline
        i = bisect.bisect_right(offsets, start)
        out.append((line.decode("utf-8", "replace").rstrip("\r"), seconds[i] if i < len(seconds) else None))
        start += len(line) + 1
    return out


@dataclass(frozen=True)
class Match:
    line: int  # 1-based line number in the whole log
    offset: int  # byte offset where the line starts
    text: str


def search(source: LogSource, query: str, limit: int = 1000) -> tuple[list[Match], bool]:
    """Every line of the whole log that holds `query` (any case), streamed from disk: the first
    `limit` of them, and whether there were more."""
    needle = query.casefold()
    found: list[Match] = []
    try:
        f = open(path(source), "rb")  # noqa: SIM115 - apart from `with`: only the open's FileNotFoundError is caught
    except FileNotFoundError:
        return [], False
    with f:
        offset, number = 0, 0
        # Lines are read with a length limit: one without newline may be the whole (sparse) log.
        while raw := f.readline(MAX_SEARCH_LINE):
            number += 1
            start, offset = offset, offset + len(raw)
            if not raw.endswith(b"\n"):  # an over-long line (or the last): read past its rest
                while rest := f.readline(MAX_READ):
                    offset += len(rest)
                    if rest.endswith(b"\n"):
                        break
            text = raw.decode("utf-8", "replace")
            if needle in text.casefold():
                if len(found) == limit:
                    return found, True
                found.append(Match(number, start, text.rstrip("\r\n")))
    return found, False
