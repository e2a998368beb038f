"""The Channels layer: channels_redis with a receive that stops once its task is cancelled.

Exit condition: remove this module (and point CHANNEL_LAYERS at channels_redis.core.
RedisChannelLayer) once either holds: the service runs on Python >= 3.12, whose asyncio.wait_for
no longer swallows a cancellation that lands as the awaited call completes (CPython gh-86296);
or a channels_redis release ends its receive loop on a cancelled task itself. As of channels_redis
4.3.0, the newest release, it does not. tests/test_channel_layer.py shows the need (its
swallowed-cancellation test fails with the stock class), and tests/test_library_seams.py fails
when the pinned channels_redis changes the private method overridden here (PINNED).
"""

import asyncio
from typing import Any

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from redis.asyncio import BlockingConnectionPool

# Redis connections per process; a caller finding all in use waits up to POOL_WAIT seconds.
POOL_SIZE = 100
POOL_WAIT = 20.0

# channels_redis internals this module relies on, as sha256 (first 16 hex digits) of their
# source in the pinned channels_redis; checked by tests/test_library_seams.py.
PINNED = {
    "channels_redis.core:RedisChannelLayer._brpop_with_clean": "363a120edcef61d5",
    "channels_redis.core:RedisChannelLayer.receive": "158a09895d9a7c8e",  # loops on _brpop_with_clean
    "channels_redis.core:RedisLoopLayer.get_connection": "db77fd7c073c2ee6",  # makes each pool with create_pool
}


class RedisChannelLayer(_RedisChannelLayer):  # type: ignore[misc]  # channels_redis has no types
    """channels_redis repeats its blocking pop until a message comes, and only a
    CancelledError ends that loop. On Python 3.11 asyncio.wait_for (redis-py sends with it)
    swallows a cancellation that lands just as the send completes, so a closed websocket
    could leave its receive polling Redis forever. Checking the task before every pop ends it."""

    async def _brpop_with_clean(self, index: int, channel: str, timeout: float) -> Any:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError()
        return await super()._brpop_with_clean(index, channel, timeout)

    def create_pool(self, index: int) -> BlockingConnectionPool:
        """A pool that, all its connections in use, makes the caller wait for one instead of
        failing: 100 viewers closing at once each leave the job's group together, and redis-py's
        default pool (100 connections, one held by a blocking receive) failed the rest with
        MaxConnectionsError. The hosts are given by address (settings.CHANNEL_LAYERS)."""
        host = dict(self.hosts[index])
        return BlockingConnectionPool.from_url(host.pop("address"), max_connections=POOL_SIZE, timeout=POOL_WAIT,
                                               **host)
