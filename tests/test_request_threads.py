"""Each HTTP request's sync code runs in one thread that is its alone while it runs, and later
requests reuse that thread instead of starting one each (core/request_threads.py)."""

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.core import signals

from core.request_threads import ThreadPerRequest
from tests.support import LiveASGI, get_one_by_one, wait_for


def request_scope() -> dict:
    return {"type": "http", "method": "GET", "path": "/", "headers": []}


class SyncCalls:
    """An ASGI app whose requests make three thread-sensitive sync calls, recording the thread of
    each; between the second and the third a request waits for `gate` (when set up)."""

    def __init__(self) -> None:
        self.threads: list[list[threading.Thread]] = []
        self.gate: asyncio.Event | None = None
        self.waiting = 0

    async def __call__(self, scope, receive, send) -> None:
        mine: list[threading.Thread] = []
        self.threads.append(mine)
        for step in range(3):
            if step == 2 and self.gate is not None:
                self.waiting += 1
                await self.gate.wait()
            mine.append(await sync_to_async(threading.current_thread)())


def serve(wrapper: ThreadPerRequest, count: int = 1) -> None:
    async def main():
        await asyncio.gather(*(wrapper(request_scope(), None, None) for _ in range(count)))

    asyncio.run(main())


@pytest.mark.unit
def test_a_requests_sync_calls_share_one_thread_which_the_next_request_reuses():
    app = SyncCalls()
    wrapper = ThreadPerRequest(app)
    serve(wrapper)
    serve(wrapper)
    first, second = app.threads
    assert len(set(first)) == 1 and first[0] is not threading.main_thread()
    assert second == first
    assert wrapper.started == 1


@pytest.mark.unit
def test_requests_in_flight_at_once_each_have_a_thread_of_their_own():
    app = SyncCalls()
    wrapper = ThreadPerRequest(app)

    async def main(count: int):
        app.gate = asyncio.Event()
        app.waiting = 0
        requests = asyncio.gather(*(wrapper(request_scope(), None, None) for _ in range(count)))
        while app.waiting < count:  # every request is between its calls
            await asyncio.sleep(0.01)
        assert wrapper.busy == count
        app.gate.set()
        await requests
        assert wrapper.busy == 0

    asyncio.run(main(5))
    assert all(len(set(calls)) == 1 for calls in app.threads)
    assert len({calls[0] for calls in app.threads}) == 5
    asyncio.run(main(5))  # the same five threads again
    assert wrapper.started == 5
    assert {calls[0] for calls in app.threads[5:]} == {calls[0] for calls in app.threads[:5]}


@pytest.mark.unit
def test_a_thread_beyond_the_idle_limit_ends():
    app = SyncCalls()
    wrapper = ThreadPerRequest(app, max_idle=1)
    serve(wrapper, 2)  # two at once: two threads, one more than may stay idle
    both = {calls[0] for calls in app.threads}
    assert len(both) == 2
    wait_for(lambda: sum(t.is_alive() for t in both) == 1, 30, "one of the two threads to end")


@pytest.mark.unit
def test_a_thread_lets_go_of_what_it_holds_as_its_last_call():
    app = SyncCalls()
    ended = []
    wrapper = ThreadPerRequest(app, max_idle=0, on_end=lambda: ended.append(threading.current_thread()))
    serve(wrapper)
    thread = app.threads[0][0]
    wait_for(lambda: not thread.is_alive(), 30, "the thread beyond the idle limit to end")
    assert ended == [thread]


@pytest.mark.unit
def test_every_idle_thread_can_be_ended_at_once():
    app = SyncCalls()
    ended = []
    wrapper = ThreadPerRequest(app, on_end=lambda: ended.append(threading.current_thread()))
    serve(wrapper, 2)
    both = {calls[0] for calls in app.threads}
    assert wrapper.idle == 2
    wrapper.end_idle()
    assert wrapper.idle == 0 and not any(t.is_alive() for t in both) and set(ended) == both


@pytest.mark.unit
def test_a_thread_idle_too_long_ends():
    now = [0.0]
    app = SyncCalls()
    wrapper = ThreadPerRequest(app, idle_seconds=60, clock=lambda: now[0])
    serve(wrapper, 2)  # two threads, both idle since 0
    now[0] = 30.0
    serve(wrapper)  # one of them, idle again since 30
    kept = app.threads[-1][0]
    old = ({calls[0] for calls in app.threads} - {kept}).pop()
    now[0] = 61.0
    serve(wrapper)  # when it ends, the other has been idle 61 s
    assert app.threads[-1][0] is kept
    wait_for(lambda: not old.is_alive(), 30, "the thread idle for 61 s to end")
    assert kept.is_alive() and wrapper.started == 2


@pytest.mark.unit
def test_the_thread_of_a_request_that_failed_is_not_reused():
    threads = []

    async def failing(scope, receive, send):
        threads.append(await sync_to_async(threading.current_thread)())
        raise RuntimeError("the view failed")

    wrapper = ThreadPerRequest(failing)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            serve(wrapper)
    assert wrapper.started == 2 and threads[0] is not threads[1] and wrapper.busy == 0
    wait_for(lambda: not threads[0].is_alive(), 30, "the failed request's thread to end")


@pytest.mark.unit
def test_other_scopes_pass_through_without_a_thread():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    wrapper = ThreadPerRequest(app)
    asyncio.run(wrapper({"type": "websocket", "path": "/"}, None, None))
    assert seen == ["websocket"] and wrapper.started == 0


@pytest.mark.django_db(transaction=True)
def test_the_services_requests_run_each_in_one_thread_and_reuse_it(alice):
    """Through the service's application under uvicorn: request_started and request_finished of
    each request in one thread, the same one for requests one after another."""
    from accounts.services import issue_token
    from paddleweb.asgi import request_threads as threads

    assert isinstance(threads, ThreadPerRequest)

    token = issue_token(alice)
    started, finished = [], []

    def on_started(**kwargs):
        started.append(threading.current_thread())

    def on_finished(**kwargs):
        finished.append(threading.current_thread())

    signals.request_started.connect(on_started)
    signals.request_finished.connect(on_finished)
    try:
        with LiveASGI() as live:
            get_one_by_one(live, token, 10)
    finally:
        signals.request_started.disconnect(on_started)
        signals.request_finished.disconnect(on_finished)
    assert len(started) == len(finished) == 10
    assert started == finished
    assert len(set(started)) == 1 and started[0].name.startswith("request")
