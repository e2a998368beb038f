"""Waking the watch loop when a job changes, instead of at its next pass (WATCH_INTERVAL).

Every committed state change of a job (jobs/signals.py) publishes the job's id on a Redis channel;
the watch loop (jobs/watch.py) listens in a thread and wakes: a job the queue just admitted, or
whose replicas were just started, is observed at once and then every HURRY_INTERVAL until it runs
(bench/launch.py). A lost message costs nothing but time: the next pass sees the job anyway.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

import redis

from core import health

log = logging.getLogger(__name__)


def channel() -> str:
    return health.redis_key("watcher-wake")


def wake(job_id: int) -> None:
    """Tell the watch loop that the job changed."""
    try:
        health.redis_client().publish(channel(), str(job_id))
    except redis.RedisError as e:  # the loop's next pass sees the change anyway
        log.warning("could not wake the watcher (%s)", e)


class Waker:
    """The watch loop's end of the channel: a descriptor that becomes readable when woken."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="watcher-wake", daemon=True)

    def fileno(self) -> int:
        return self._read

    def start(self) -> None:
        self._thread.start()

    def drain(self) -> None:
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        os.close(self._read)
        os.close(self._write)

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                pubsub = health.redis_client().pubsub(  # type: ignore[no-untyped-call]  # redis-py's is untyped
                    ignore_subscribe_messages=True)
                pubsub.subscribe(channel())
                try:
                    while not self._stopping.is_set():
                        if pubsub.get_message(timeout=1.0) is not None:
                            with contextlib.suppress(BlockingIOError):  # already woken: the pipe is full
                                os.write(self._write, b"\0")
                finally:
                    pubsub.close()
            except redis.RedisError as e:  # Redis restarting: passes go on at WATCH_INTERVAL
                log.warning("watcher wake-ups: %s; retrying", e)
                self._stopping.wait(1.0)
