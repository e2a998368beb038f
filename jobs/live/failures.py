"""The lines of a failed process's log that say why it failed, for the job's message and its
Restarting events: its last Python traceback, whole, with the exception's message; without one,
its last lines less the frameworks' routine output (glog's INFO and WARNING lines, which Paddle's
C++ side prints by the hundred as it shuts down, after the traceback that matters)."""

from __future__ import annotations

import re

# glog's prefix: severity, MMDD, time, thread, file:line]. E and F (error, fatal) lines matter.
_ROUTINE = re.compile(r"^[IW]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]")
_TRACEBACK = "Traceback (most recent call last):"


def excerpt(text: str, lines: int = 20) -> str:
    """At most `lines` lines of `text` (a log's end) that explain a failure (see the module)."""
    all_lines = text.rstrip("\n").split("\n")
    starts = [i for i, line in enumerate(all_lines) if line.startswith(_TRACEBACK)]
    if starts:
        block = _traceback(all_lines, starts[-1])
        if len(block) > lines:  # its header, then its end: the innermost frames and the error
            block = [block[0], f"  ... {len(block) - lines + 1} lines of the traceback left out ...",
                     *block[-(lines - 2):]]
        return "\n".join(block)
    kept = [line for line in all_lines if not _ROUTINE.match(line)]
    return "\n".join(kept[-lines:]) if lines else ""


def _traceback(lines: list[str], start: int) -> list[str]:
    """From the header through the exception line and its message's indented continuation (Paddle's
    "In user code:" frames, [Hint: ...], [operator < ... > error])."""
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1  # the frames ("  File ...", "    code")
    end += 1  # the exception line
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t[") and not _ROUTINE.match(lines[end]):
        end += 1
    block = [line for line in lines[start:end] if not _ROUTINE.match(line)]
    while block and not block[-1].strip():
        block.pop()
    return block
