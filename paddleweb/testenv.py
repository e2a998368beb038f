"""Loaded by pytest with `-p` before Django starts: tests keep their database, Redis socket,
storage and logs under var/test so they never touch (or race) a running dev server."""

import os
from pathlib import Path

os.environ.setdefault("PADDLECLOUD_VAR", str(Path(__file__).resolve().parent.parent / "var" / "test"))
os.environ.setdefault("KILL_GRACE_SECONDS", "3")
