"""A web process lets a few HTTP requests in at once and the rest wait their turn; a request that
holds its slot past its lease lets the next one in (core/request_slots.py)."""

import asyncio
import time

import httpx
import pytest
from django.conf import settings

from core.request_slots import RequestSlots
from tests.support import LiveASGI, in_fresh_settings


class Held:
    """An ASGI app whose every request stays inside until its own event is set."""

    def __init__(self) -> None:
        self.inside: list[int] = []
        self.entered: list[int] = []
        self.leave: dict[int, asyncio.Event] = {}

    async def __call__(self, scope, receive, send) -> None:
        number = scope["number"]
        self.leave[number] = asyncio.Event()
        self.inside.append(number)
        self.entered.append(number)
        try:
            await self.leave[number].wait()
        finally:
            self.inside.remove(number)


def request(number: int, kind: str = "http") -> dict:
    return {"type": kind, "path": "/", "number": number}


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def others_get_their_chance() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


def start(slots: RequestSlots, number: int) -> asyncio.Task:
    return asyncio.create_task(slots(request(number), None, None))


async def alone_inside(app: Held, slots: RequestSlots, number: int) -> asyncio.Task:
    """Request `number`, started and let in while no other request is inside."""
    task = start(slots, number)
    await until(lambda: app.inside == [number], f"request {number} inside")
    return task


async def one_at_a_time(app: Held, slots: RequestSlots, first: int, second: int) -> None:
    """Two new requests go in one after the other: one slot is free, not two."""
    both = [start(slots, n) for n in (first, second)]
    await until(lambda: app.inside == [first], "the first request inside")
    await others_get_their_chance()
    assert app.inside == [first]
    app.leave[first].set()
    await until(lambda: app.inside == [second], "the second request inside")
    app.leave[second].set()
    await asyncio.gather(*both)


@pytest.mark.unit
def test_no_more_requests_than_slots_run_and_the_next_enters_as_one_ends():
    app = Held()
    slots = RequestSlots(app, 2, lease=600)

    async def main():
        requests = [start(slots, n) for n in range(5)]
        await until(lambda: len(app.inside) == 2, "two requests inside")
        await others_get_their_chance()
        assert app.inside == [0, 1]
        app.leave[0].set()
        await until(lambda: 2 in app.inside, "the third request to enter")
        await others_get_their_chance()
        assert app.inside == [1, 2]
        for n in (1, 2, 3, 4):
            await until(lambda n=n: n in app.leave, f"request {n} to enter")
            app.leave[n].set()
        await asyncio.gather(*requests)
        assert app.entered == [0, 1, 2, 3, 4]  # in the order they came

    asyncio.run(main())


@pytest.mark.unit
def test_a_request_past_its_lease_lets_the_next_in_and_goes_on():
    app = Held()
    slots = RequestSlots(app, 1, lease=0.05)

    async def main():
        slow = await alone_inside(app, slots, 0)
        following = start(slots, 1)
        await until(lambda: app.inside == [0, 1], "the next request to enter beside the slow one")
        app.leave[0].set()
        app.leave[1].set()
        await asyncio.gather(slow, following)
        slots.lease = 600
        await one_at_a_time(app, slots, 2, 3)  # each slot given back once, not twice

    asyncio.run(main())


@pytest.mark.unit
def test_a_request_cancelled_while_waiting_takes_no_slot():
    app = Held()
    slots = RequestSlots(app, 1, lease=600)

    async def main():
        first = await alone_inside(app, slots, 0)
        gone = start(slots, 1)  # its client hangs up while it waits
        await others_get_their_chance()
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        app.leave[0].set()
        await first
        await one_at_a_time(app, slots, 2, 3)
        assert 1 not in app.entered

    asyncio.run(main())


@pytest.mark.unit
def test_a_request_that_fails_gives_its_slot_back():
    entered = []

    async def failing(scope, receive, send):
        entered.append(scope["number"])
        raise RuntimeError("the view failed")

    slots = RequestSlots(failing, 1, lease=600)

    async def main():
        for n in range(3):
            with pytest.raises(RuntimeError):
                await asyncio.wait_for(slots(request(n), None, None), 30)

    asyncio.run(main())
    assert entered == [0, 1, 2]


@pytest.mark.unit
def test_websockets_and_a_process_without_a_limit_do_not_wait():
    app = Held()
    limited, unlimited = RequestSlots(app, 1, lease=600), RequestSlots(app, 0)

    async def main():
        tasks = [start(limited, 0),
                 asyncio.create_task(limited(request(1, "websocket"), None, None)),
                 *(start(unlimited, n) for n in (2, 3, 4))]
        await until(lambda: sorted(app.inside) == [0, 1, 2, 3, 4], "every request inside")
        for event in app.leave.values():
            event.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())


@pytest.mark.unit
def test_each_request_says_how_long_it_waited_for_its_slot():
    app, waits = Held(), []
    slots = RequestSlots(app, 1, lease=600, waited=waits.append)

    async def main():
        first = await alone_inside(app, slots, 0)
        second = start(slots, 1)
        await others_get_their_chance()
        await asyncio.sleep(0.05)  # the first holds its slot at least this long, the second waits
        app.leave[0].set()
        await until(lambda: app.inside == [1], "the second request inside")
        app.leave[1].set()
        await asyncio.gather(first, second)

    asyncio.run(main())
    assert len(waits) == 2 and waits[0] < waits[1] and waits[1] >= 0.049


@pytest.mark.unit
def test_a_wait_that_cannot_be_recorded_still_gives_the_slot_back():
    def broken(seconds: float) -> None:
        raise RuntimeError("the metric failed")

    app = Held()
    slots = RequestSlots(app, 1, lease=600, waited=broken)

    async def main():
        for _ in range(2):
            with pytest.raises(RuntimeError):
                await asyncio.wait_for(slots(request(0), None, None), 30)

    asyncio.run(main())
    assert app.entered == []


@pytest.mark.django_db(transaction=True)
def test_the_service_counts_each_requests_wait_for_a_slot_in_its_metrics():
    from paddleweb.asgi import application
    from paddleweb.prometheus import REGISTRY

    http = application.application_mapping["http"]

    def waits() -> float:
        return REGISTRY.get_sample_value("paddlecloud_http_request_slot_wait_seconds_count") or 0

    configured, http.slots = http.slots, 2  # PostgreSQL's default is no limit, and nothing to count
    before = waits()
    try:
        with LiveASGI() as live, httpx.Client(base_url=live.url, timeout=60) as client:
            for _ in range(3):
                assert client.get("/api/v2/version/").status_code == 200
    finally:
        http.slots = configured
    assert waits() - before == 3


@pytest.mark.unit
def test_the_services_http_requests_wait_for_the_configured_slots():
    from paddleweb.asgi import application, request_threads

    http = application.application_mapping["http"]
    assert isinstance(http, RequestSlots) and http.app is request_threads
    assert http.slots == settings.WEB_REQUEST_SLOTS


@pytest.mark.unit
@pytest.mark.parametrize(("environment", "slots"), [
    ({}, 2),  # SQLite: its queries run in the web process
    ({"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/paddlecloud"}, 0),
    ({"WEB_REQUEST_SLOTS": "5"}, 5),
])
def test_the_slots_default_to_two_on_sqlite_and_none_on_postgresql(tmp_path, environment, slots):
    printed = in_fresh_settings(tmp_path, "from django.conf import settings\nprint(settings.WEB_REQUEST_SLOTS)",
                                **environment)
    assert int(printed) == slots
