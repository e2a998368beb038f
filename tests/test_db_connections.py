"""Requests served under ASGI (uvicorn, as in production) reuse database connections
(paddleweb/settings.py). On PostgreSQL they come from the process's pool: each request's sync code
runs in a thread of its own, yet however many requests come, the sessions stay within the pool's
size, and a connection the server dropped is replaced by a healthy one instead of failing a
request. On SQLite each request thread keeps its own, reused by the thread's later requests and
closed when the thread ends (core/request_threads.py)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.conf import settings
from django.core import signals
from django.db import connection, connections
from django.db.backends.signals import connection_created

from accounts.services import issue_token
from tests.support import LiveASGI, get_one_by_one

pytestmark = pytest.mark.django_db(transaction=True)


def sessions() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        count: int = cur.fetchone()[0]
    return count


def get_all(live: LiveASGI, token: str, count: int) -> set[int]:
    def get(_):
        with httpx.Client(base_url=live.url, timeout=60) as http:
            return http.get("/api/v2/jobs/", headers={"Authorization": f"Token {token}"}).status_code

    with ThreadPoolExecutor(20) as pool:
        return set(pool.map(get, range(count)))


@pytest.fixture
def postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL sessions and pool")


def test_parallel_requests_hold_no_more_sessions_than_the_pool(postgresql, alice):
    pool_size = settings.DATABASES["default"]["OPTIONS"]["pool"]["max_size"]
    before = sessions()
    token = issue_token(alice)
    with LiveASGI() as live:
        assert get_all(live, token, 60) == {200}
        assert sessions() <= before + pool_size
        assert get_all(live, token, 60) == {200}
        assert sessions() <= before + pool_size


def idle_pooled_sessions() -> list[int]:
    """The backend pids of the connections now idle in this process's pool (taken out and put back)."""
    pool = connection.pool
    taken = [pool.getconn() for _ in range(pool.get_stats()["pool_available"])]
    for conn in taken:
        pool.putconn(conn)
    return [conn.info.backend_pid for conn in taken]


def test_a_connection_the_server_dropped_is_replaced_before_a_request_uses_it(postgresql, alice):
    token = issue_token(alice)
    with LiveASGI() as live:
        assert get_all(live, token, 20) == {200}
        # As a PostgreSQL restart would: end the sessions idle in the pool (only those: this
        # process's other threads keep theirs).
        pids = idle_pooled_sessions()
        assert pids
        with connection.cursor() as cur:
            cur.execute("SELECT count(pg_terminate_backend(pid)) FROM unnest(%s::int[]) AS pid", [pids])
            assert cur.fetchone()[0] == len(pids)
        assert get_all(live, token, 20) == {200}


@pytest.fixture
def sqlite():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite: each request thread keeps its connection")


@pytest.fixture
def request_threads():
    from paddleweb.asgi import request_threads

    return request_threads


def test_on_sqlite_requests_one_after_another_open_no_connection_each(sqlite, alice):
    token = issue_token(alice)
    opened = []

    def on_created(sender, connection, **kwargs):
        if threading.current_thread().name.startswith("request"):
            opened.append(connection)

    connection_created.connect(on_created)
    try:
        with LiveASGI() as live:
            get_one_by_one(live, token, 20)
    finally:
        connection_created.disconnect(on_created)
    assert len(opened) <= 1  # none if an idle thread with its connection took the first


def test_a_request_threads_connection_is_closed_when_the_thread_ends(alice, request_threads):
    token = issue_token(alice)
    used = []  # (thread, its connection) of each request

    def on_finished(**kwargs):
        used.append((threading.current_thread(), connections["default"]))

    signals.request_finished.connect(on_finished)
    max_idle = request_threads.max_idle
    try:
        with LiveASGI() as live:
            get_one_by_one(live, token, 1)
            request_threads.max_idle = 0  # every thread ends as the next request ends
            get_one_by_one(live, token, 1)
    finally:
        request_threads.max_idle = max_idle
        signals.request_finished.disconnect(on_finished)
    for thread, wrapper in used:
        thread.join(30)
        assert not thread.is_alive() and wrapper.connection is None
