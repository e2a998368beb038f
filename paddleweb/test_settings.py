"""Settings for the test run: the same settings, with the test's state kept under var/test so
tests never touch (or race) a running dev server, and a queue and channel prefix of the run's
own so no stale task or message from another run is picked up."""

import os
from pathlib import Path

os.environ.setdefault("PADDLECLOUD_VAR", str(Path(__file__).resolve().parent.parent / "var" / "test"))
os.environ.setdefault("KILL_GRACE_SECONDS", "3")
os.environ.setdefault("CELERY_QUEUE", f"paddlecloud-test-{os.getpid()}")
os.environ.setdefault("CHANNELS_PREFIX", f"paddlecloud-test-{os.getpid()}")

from .settings import *  # noqa: E402,F403
