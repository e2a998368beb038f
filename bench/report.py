"""Rows of the benches' one table: measure, baseline, project, ratio, goal, met.

Each bench prints its own rows as it finishes and, when BENCH_RESULTS names a file (as `make
bench` does), appends them there as JSON lines; `python bench/report.py FILE` prints the table of
them all, with the load averages the benches saw.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from service import load


@dataclass
class Row:
    measure: str
    baseline: str  # the baseline's figure with its unit, or "-" where the goal is absolute
    project: str
    ratio: str  # project / baseline (or what the goal compares), "-" where none
    goal: str
    met: bool
    load: str = ""  # the load average when the row was measured


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def emit(rows: list[Row], title: str) -> None:
    for row in rows:
        row.load = row.load or load()
    print(f"\n== {title} (load average {load()})")
    table(rows)
    path = os.environ.get("BENCH_RESULTS")
    if path:
        with open(path, "a") as f:
            for row in rows:
                f.write(json.dumps(asdict(row)) + "\n")


def table(rows: list[Row]) -> None:
    heads = ("measure", "baseline", "project", "ratio", "goal", "met", "load avg")
    cells = [(r.measure, r.baseline, r.project, r.ratio, r.goal, "met" if r.met else "NOT MET", r.load)
             for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(heads)]
    line = "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))
    print(line)
    print("-" * len(line))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))


def main(path: str) -> int:
    rows = [Row(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]
    print(f"\n== make bench: every row against the live service (load average now {load()})")
    table(rows)
    missed = [r.measure for r in rows if not r.met]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} met" + (f"; not met: {', '.join(missed)}" if missed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
