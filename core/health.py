"""Liveness of the service's parts: heartbeats from the Celery worker and the jobs watcher, and
the status that /api/v2/health/, the pages' banner and the Kubernetes probes read.

Each worker or watcher process writes `<CACHE_PREFIX>:alive:<role>:<host>` in Redis with a time to
live of HEARTBEAT_TTL seconds, renewed every HEARTBEAT_INTERVAL: a process that dies (even by
`kill -9`) or hangs is seen gone within HEARTBEAT_TTL. Redis, not the database, because a
beat every few seconds per process should cost nothing and vanish by itself.

`python -m core.health worker|watcher` exits 0 when this host's process of that role beat
recently (the Kubernetes liveness command of those pods), 1 otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

import redis
from django.conf import settings
from django.db import connection

if TYPE_CHECKING:
    from django.http import HttpRequest

ROLES = ("worker", "watcher")


def redis_key(kind: str) -> str:
    """`<CACHE_PREFIX>:<kind>:`, where this install's own Redis keys start: installs (or test
    runs) sharing a Redis each see only their own heartbeats and metrics."""
    return f"{settings.CACHES['default']['KEY_PREFIX']}:{kind}:"


def prefix() -> str:
    """Where heartbeat keys start."""
    return redis_key("alive")


def redis_client() -> redis.Redis:
    return _client(settings.REDIS_URL)


@functools.cache
def _client(url: str) -> redis.Redis:
    # One connection pool per process (redis-py gives a forked child fresh connections).
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def beat(role: str, host: str | None = None) -> None:
    """Say that this host's `role` process is alive (for HEARTBEAT_TTL seconds)."""
    redis_client().set(f"{prefix()}{role}:{host or socket.gethostname()}", "1", ex=settings.HEARTBEAT_TTL)


def forget(role: str, host: str | None = None) -> None:
    """A clean stop: gone at once rather than after the time to live."""
    redis_client().delete(f"{prefix()}{role}:{host or socket.gethostname()}")


def alive(role: str) -> list[str]:
    """The hosts whose `role` process beat within HEARTBEAT_TTL."""
    return sorted(k.decode().rsplit(":", 1)[1] for k in redis_client().scan_iter(f"{prefix()}{role}:*"))


class Heartbeat(threading.Thread):
    """Beats for `role` every HEARTBEAT_INTERVAL from a daemon thread until stopped. A failed
    beat (Redis restarting) is retried at the next interval: the process is not the problem."""

    def __init__(self, role: str, host: str | None = None):
        super().__init__(name=f"heartbeat-{role}", daemon=True)
        self.role, self.host = role, host
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(redis.RedisError):
                beat(self.role, self.host)
            self.stopping.wait(settings.HEARTBEAT_INTERVAL)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)
        with contextlib.suppress(redis.RedisError):
            forget(self.role, self.host)


def status() -> dict[str, dict[str, Any]]:
    """Each part's state: {"web": {"up": True}, "db": ..., "redis": ..., "worker": {"up": bool,
    "hosts": [...]}, "watcher": ...}. Errors are named by kind only (no addresses or secrets)."""
    parts: dict[str, dict[str, Any]] = {"web": {"up": True}}
    try:
        connection.ensure_connection()
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        parts["db"] = {"up": True}
    except Exception as e:  # noqa: BLE001 - any database failure means "down"; its kind says which
        parts["db"] = {"up": False, "error": type(e).__name__}
    try:
        redis_client().ping()
        parts["redis"] = {"up": True}
        for role in ROLES:
            hosts = alive(role)
            parts[role] = {"up": bool(hosts), "hosts": hosts}
    except redis.RedisError as e:
        parts["redis"] = {"up": False, "error": type(e).__name__}
        for role in ROLES:  # heartbeats live in Redis: without it nobody can tell
            parts[role] = {"up": False, "hosts": []}
    return parts


def missing_processes() -> list[str]:
    """The roles with no live process ([] when Redis cannot be asked: status() reports that)."""
    try:
        return [role for role in ROLES if not alive(role)]
    except redis.RedisError:
        return []


def warning_context(request: HttpRequest) -> dict[str, str]:
    """Template context processor: `service_warning`, shown by base.html to logged-in users
    when no worker or watcher is alive, so a job that stays Queued has a visible reason."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    missing = missing_processes()
    if not missing:
        return {}
    what = {"worker": "no worker is running: queued jobs wait until one starts",
            "watcher": "no jobs watcher is running: job states and live logs are not updated"}
    return {"service_warning": "; ".join(what[m] for m in missing).capitalize() + "."}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ROLES:
        print(f"usage: python -m core.health {'|'.join(ROLES)}", file=sys.stderr)
        return 2
    try:
        up = socket.gethostname() in alive(argv[0])
    except redis.RedisError as e:
        print(f"cannot reach Redis: {type(e).__name__}", file=sys.stderr)
        return 1
    print(f"{argv[0]} on {socket.gethostname()}: {'alive' if up else 'no heartbeat'}")
    return 0 if up else 1


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")  # settings alone: no app loading
    sys.exit(main(sys.argv[1:]))
