"""Output: tables by default (rich), or -o wide | json | yaml | name.

rich and yaml are imported when a table or YAML is printed, not with the module: every command
imports this one, and the two cost about as much as the rest of the command line's start
(client/tests/test_cli_start.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

FORMATS = ("table", "wide", "json", "yaml", "name")


def console(stderr: bool = False) -> Console:
    """A console on the *current* sys.stdout/stderr (tests swap them). Off a terminal lines
    are never wrapped, so output stays greppable."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=stream, width=None if tty else 4000, soft_wrap=not tty, highlight=False,
                   emoji=False, markup=False)


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
    out = console()
    if fmt == "json":
        out.out(json.dumps(data, indent=2, ensure_ascii=False, default=str), highlight=False)
        return
    if fmt == "yaml":
        import yaml

        out.out(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False).rstrip("\n"),
                highlight=False)
        return
    rows = data if isinstance(data, list) else [data]
    if fmt == "name":
        for row in rows:
            out.out(name(row) if name else str(row.get("name", "")), highlight=False)
        return
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD if out.is_terminal else None, show_edge=False, pad_edge=False,
                  header_style="bold", padding=(0, 3, 0, 0), expand=False)
    cols = [*columns, *(wide if fmt == "wide" else ())]
    for title, _ in cols:
        table.add_column(title, no_wrap=title not in ("MESSAGE", "REASON"), overflow="fold")
    for row in rows:
        table.add_row(*(dash(get(row)) for _, get in cols))
    if not rows:
        console(stderr=True).print("No resources found.")
        return
    if out.is_terminal:
        out.print(table)
        return
    with out.capture() as captured:
        out.print(table)
    out.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
