"""`log_metric`: one machine-readable line per step, which the job page plots as curves.

The format (parsed by the server, do not change it)::

    PADDLECLOUD_METRIC {"step": 3, "loss": 0.25, "acc": 0.9}

A single line: the prefix, one space, then a JSON object with a numeric `step` and one number
per metric. Printed to stdout and flushed at once, so it reaches the job's logs even when the
program is killed right after.
"""

from __future__ import annotations

import json
import math
import sys
from typing import IO, Union

PREFIX = "PADDLECLOUD_METRIC"
Number = Union[int, float]


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # type: ignore[arg-type]  # numpy scalars, 0-d tensors
        except (TypeError, ValueError):
            raise TypeError(f"log_metric: {name} must be a number, got {type(value).__name__}") from None
    return float(value)


def format_metric(step: Number, **values: object) -> str:
    if isinstance(step, bool) or not isinstance(step, (int, float)):
        raise TypeError(f"log_metric: step must be a number, got {type(step).__name__}")
    if not values:
        raise ValueError("log_metric: give at least one metric, e.g. log_metric(step, loss=0.5)")
    record: dict[str, object] = {"step": step}
    for name, value in values.items():
        if name == "step":
            raise ValueError("log_metric: 'step' is the first argument, not a metric name")
        number = _number(name, value)
        # JSON has no NaN/Infinity; null keeps the line valid JSON for any parser.
        record[name] = number if math.isfinite(number) else None
    return f"{PREFIX} {json.dumps(record, allow_nan=False)}"


def log_metric(step: Number, file: IO[str] | None = None, **values: object) -> str:
    """Print `PADDLECLOUD_METRIC {"step": step, "<name>": <float>, ...}` and flush; returns the line."""
    line = format_metric(step, **values)
    out = file or sys.stdout
    out.write(line + "\n")
    out.flush()
    return line
