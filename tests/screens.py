"""Screenshots that browser tests keep as artifacts (var/test/artifacts/, git-ignored; CI may
collect them): what a page looked like when its test ran."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "var/test/artifacts"))


def screenshot(page: Any, name: str, *, full_page: bool = True) -> Path:
    """Save the page (a Playwright page) as <name>.png under ARTIFACTS; returns the file."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
