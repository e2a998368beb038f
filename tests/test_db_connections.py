"""Requests served under ASGI (uvicorn, as in production) reuse PostgreSQL connections from the
process's pool (paddleweb/settings.py): each request's sync code runs in a thread of its own, yet
however many requests come, the sessions stay within the pool's size, and a connection the server
dropped is replaced by a healthy one instead of failing a request."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.conf import settings
from django.db import connection

from accounts.services import issue_token
from tests.support import LiveASGI

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
