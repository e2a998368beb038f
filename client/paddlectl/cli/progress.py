"""Progress bars for uploads and downloads (rich, on stderr)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .output import console

ProgressFn = Callable[[int, int], None]


@contextmanager
def transfer_progress(label: str, enabled: bool = True) -> Iterator[ProgressFn | None]:
    """Yields `progress(done_bytes, total_bytes)` drawing a bar on stderr. Off a terminal the bar
    is replaced by one line at the start and one at the end."""
    if not enabled:
        yield None
        return
    err = console(stderr=True)
    if not err.is_terminal:
        state = {"total": 0, "done": 0}

        def note(done: int, total: int) -> None:
            if not state["total"] and total:
                err.print(f"{label} ({total} bytes) ...")
            state.update(done=done, total=total)

        yield note
        if state["total"]:
            err.print(f"{label} ... Done")
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
                  TimeRemainingColumn(), console=err, transient=False) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update
