"""The Channels layer against the real Redis: idle receives wait, cancelled receives stop."""

import asyncio
import contextlib

from channels.layers import get_channel_layer


async def test_a_receive_waits_quietly_past_one_blocking_pop():
    layer = get_channel_layer()
    name = await layer.new_channel()
    receive = asyncio.ensure_future(layer.receive(name))
    done, _ = await asyncio.wait([receive], timeout=layer.brpop_timeout + 2)
    assert not done  # no "Timeout reading from Redis" after one empty pop
    await layer.send(name, {"type": "hello"})
    assert await asyncio.wait_for(receive, 5) == {"type": "hello"}


async def test_a_receive_whose_cancellation_was_swallowed_still_stops():
    layer = get_channel_layer()
    name = await layer.new_channel()

    async def cancelled_then_receive():
        asyncio.current_task().cancel()
        # What Python 3.11's wait_for does when the cancel lands as its future completes
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        return await layer.receive(name)

    receive = asyncio.ensure_future(cancelled_then_receive())
    done, _ = await asyncio.wait([receive], timeout=layer.brpop_timeout * 2 + 2)
    assert receive in done and receive.cancelled()
