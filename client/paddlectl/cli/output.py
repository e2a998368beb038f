"""Output: tables by default, or -o wide | json | yaml | name.

Tables are plain columns, as kubectl prints them, the same on a terminal and in a pipe: each column
as wide as its widest cell plus three spaces, no trailing blanks, a cell's lines one under the
other. They need no library: rich, which draws the progress bars, cost a table command about 25 ms
of its start to import (bench/cli_start.py), and yaml is imported only to print YAML
(client/tests/test_cli_start.py)."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

FORMATS = ("table", "wide", "json", "yaml", "name")
GUTTER = 3  # spaces after each column
CONTROLS = {c: "?" for c in (*range(0x20), *range(0x7F, 0xA0))}  # C0, DEL and C1 (0x9b is a CSI too)
SGR = re.compile(r"(\x1b\[[0-9;:]*m)")  # colours and bold: they move nothing
C1_IN_JSON = {c: f"\\u{c:04x}" for c in range(0x7F, 0xA0)}  # json.dumps leaves them raw


def console(stderr: bool = False) -> Console:
    """A rich console on the *current* sys.stdout/stderr (tests swap them), for what is drawn on a
    terminal (progress bars, dimmed notes). Off a terminal lines are never wrapped."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = is_terminal(stream)
    return Console(file=stream, width=None if tty else 4000, soft_wrap=not tty, highlight=False,
                   emoji=False, markup=False)


def line(text: str, stderr: bool = False) -> None:
    """Print `text` and a newline on the *current* sys.stdout (or stderr)."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(text + "\n")


def say(text: str, stderr: bool = False) -> None:
    """`line(text)` for text with the server's words in it (names, states, messages): on a
    terminal with their control characters shown as "?" (printable)."""
    stream = sys.stderr if stderr else sys.stdout
    line(printable(text, "\n\t") if is_terminal(stream) else text, stderr)


def is_terminal(stream: Any) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def width(text: str) -> int:
    """The columns `text` takes on a terminal: two for a wide or full-width character (CJK), none
    for a combining mark."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def printable(text: str, keep: str = "", colours: bool = False) -> str:
    """`text` with control characters (but those in `keep`) shown as "?", as ls shows them on a
    terminal: what the server hands back (a file's name, a job's message or log) cannot move the
    cursor, clear the screen or write the clipboard (OSC 52). `colours` keeps SGR sequences."""
    table = {c: r for c, r in CONTROLS.items() if chr(c) not in keep} if keep else CONTROLS
    if colours and "\x1b" in text:
        return "".join(part if i % 2 else part.translate(table) for i, part in enumerate(SGR.split(text)))
    return text.translate(table)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], terminal: bool = False) -> str:
    """`rows` under `header` in aligned columns (see the module's docstring)."""
    grid = [[cell.expandtabs().splitlines() or [""] for cell in row] for row in [header, *rows]]
    if terminal:
        grid = [[[printable(part) for part in cell] for cell in row] for row in grid]
    widths = [max(width(part) for row in grid for part in row[i]) + GUTTER for i in range(len(header))]
    out = []
    for row in grid:
        for k in range(max(len(cell) for cell in row)):
            parts = [cell[k] if k < len(cell) else "" for cell in row]
            out.append("".join(p + " " * (w - width(p)) for p, w in zip(parts, widths, strict=True)).rstrip())
    return "\n".join(out)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def timestamp(value: str | None) -> str:
    moment = parse_time(value)
    if moment is None:
        return "-"
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(value: str | None, now: datetime | None = None) -> str:
    """How long ago, as kubectl writes it (90s, 5m12s, 45m, 3h4m, 30h, 5d3h, 150d, 2y30d)."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    return human_duration(((now or datetime.now(timezone.utc)) - moment).total_seconds())


def human_duration(seconds: float) -> str:
    """kubectl's duration.HumanDuration: two units while the smaller one still says something."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 120:
        return f"{max(s, 0)}s"
    minutes, hours = s // 60, s // 3600
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def cores(millis: int | None) -> str:
    """CPU millicores as cores: 2000 -> 2, 500 -> 0.5."""
    return "-" if millis is None else (f"{millis // 1000}" if millis % 1000 == 0 else f"{millis / 1000:g}")


def count(n: int, noun: str) -> str:
    """1 trainer, 2 trainers."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{int(value)}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{n}B"


def dash(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return str(value)


Column = tuple[str, Callable[[dict[str, Any]], Any]]


def emit(data: Any, fmt: str, columns: Sequence[Column] = (), wide: Sequence[Column] = (),
         name: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Print a list of records (or one record) in the chosen format."""
    if fmt == "json":
        line(json.dumps(data, indent=2, ensure_ascii=False, default=str).translate(C1_IN_JSON))
        return
    if fmt == "yaml":
        import yaml

        line(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False).rstrip("\n"))
        return
    rows = data if isinstance(data, list) else [data]
    if fmt == "name":
        for row in rows:
            say(name(row) if name else str(row.get("name", "")))
        return
    if not rows:
        line("No resources found.", stderr=True)
        return
    cols = [*columns, *(wide if fmt == "wide" else ())]
    line(table([title for title, _ in cols], [[dash(get(row)) for _, get in cols] for row in rows],
               terminal=is_terminal(sys.stdout)))
