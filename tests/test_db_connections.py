"""Requests served under ASGI (uvicorn, as in production) leave no database session behind: each
request's sync code runs in a thread of its own, and a connection kept past the request would
outlive it until PostgreSQL refuses new clients."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection

from accounts.services import issue_token
from tests.support import LiveASGI, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def sessions() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        count: int = cur.fetchone()[0]
    return count


def test_parallel_requests_leave_no_database_session_open(alice):
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL sessions")
    before = sessions()
    token = issue_token(alice)
    with LiveASGI() as live, ThreadPoolExecutor(20) as pool:
        def get(_):
            with httpx.Client(base_url=live.url, timeout=60) as http:
                return http.get("/api/v2/jobs/", headers={"Authorization": f"Token {token}"}).status_code

        assert set(pool.map(get, range(60))) == {200}
        wait_for(lambda: sessions() <= before, 30, what=lambda: f"{sessions()} sessions, {before} before the requests")
