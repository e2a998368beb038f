"""Settings for the test run: the same settings, with the test's state kept under var/test so
tests never touch (or race) a running dev server, and a queue, channel and cache prefix of the run's
own so no stale task or message from another run is picked up."""

import os
from pathlib import Path

os.environ.setdefault("PADDLECLOUD_VAR", str(Path(__file__).resolve().parent.parent / "var" / "test"))
os.environ.setdefault("KILL_GRACE_SECONDS", "3")
# One run's own queue, channel and cache prefix and bundled Redis. The first process of a run names
# them and the processes it starts inherit them; a pytest-xdist worker is a run of its own (it
# inherits the controller's environment, which must not make the workers share them).
_RUN = os.environ.setdefault(f"PADDLECLOUD_TEST_RUN_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}",
                             f"paddlecloud-test-{os.getpid()}")
os.environ["CELERY_QUEUE"] = os.environ["CHANNELS_PREFIX"] = os.environ["CACHE_PREFIX"] = _RUN
# With REDIS_URL unset each run starts, and at its end stops, a bundled Redis of its own.
os.environ["PADDLECLOUD_REDIS_SOCKET"] = f"/tmp/{_RUN}.sock"

from .settings import *  # noqa: E402,F403

# A test database of this run's own, so two test runs at once (or a run beside a dev server) never
# drop each other's tables.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-db-{os.getpid()}.sqlite3")}  # noqa: F405
    # A killed earlier run whose pid this one reuses may have left its write-ahead log behind:
    # SQLite would replay it into this run's new database and find it malformed.
    # (pytest-django names a pytest-xdist worker's database <name>_gw<n>.)
    for _stale in VAR_DIR.glob(f"test-db-{os.getpid()}.sqlite3*"):  # noqa: F405
        if _stale.name.endswith(("-wal", "-shm", "-journal")):
            _stale.unlink(missing_ok=True)
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_paddlecloud_{os.getpid()}"}  # noqa: F405
