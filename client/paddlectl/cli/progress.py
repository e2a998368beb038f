"""Progress bars for uploads and downloads on stderr: rich's on a terminal, two plain lines off one."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .output import console, is_terminal, line

ProgressFn = Callable[[int, int], None]


@contextmanager
def transfer_progress(label: str, enabled: bool = True) -> Iterator[ProgressFn | None]:
    """Yields `progress(done_bytes, total_bytes)` drawing a bar on stderr. Off a terminal the bar
    is replaced by one line at the start and one at the end."""
    if not enabled:
        yield None
        return
    if not is_terminal(sys.stderr):
        state = {"total": 0, "done": 0}

        def note(done: int, total: int) -> None:
            if not state["total"] and total:
                line(f"{label} ({total} bytes) ...", stderr=True)
            state.update(done=done, total=total)

        yield note
        if state["total"]:
            line(f"{label} ... Done", stderr=True)
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=console(stderr=True), transient=False) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update
