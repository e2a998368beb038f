"""The Channels layer: channels_redis with a receive that stops once its task is cancelled."""

import asyncio

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer


class RedisChannelLayer(_RedisChannelLayer):
    """channels_redis repeats its blocking pop until a message comes, and only a
    CancelledError ends that loop. On Python 3.11 asyncio.wait_for (redis-py sends with it)
    swallows a cancellation that lands just as the send completes, so a closed websocket
    could leave its receive polling Redis forever. Checking the task before every pop ends it."""

    async def _brpop_with_clean(self, index, channel, timeout):
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError()
        return await super()._brpop_with_clean(index, channel, timeout)
