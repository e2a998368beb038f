"""The HTTP layer's retries (paddlectl/api.py), against a real HTTP server on loopback that
answers 503 a given number of times before it answers: an idempotent request is tried again,
with backoff, until it gets an answer or runs out of retries; a request that reached the server
and failed there is never sent twice unless the server said 502/503/504."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.unit


class Flaky:
    """A server whose first `failures` requests get a 503 (or, with `drop`, a closed connection
    after their head is read), the rest a JSON answer; it records each request's method."""

    def __init__(self, failures: int, drop: bool = False) -> None:
        self.failures, self.drop, self.seen = failures, drop, []
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                flaky.seen.append((self.command, time.monotonic()))
                if len(flaky.seen) <= flaky.failures:
                    if flaky.drop:
                        self.close_connection = True
                        self.connection.close()
                        return
                    self.send_error(503)
                    return
                body = json.dumps({"ok": len(flaky.seen)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.answer()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Flaky:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def gaps(self) -> list[float]:
        return [b - a for (_, a), (_, b) in zip(self.seen, self.seen[1:])]


def test_a_get_is_retried_through_503s_with_growing_backoff():
    from paddlectl.api import API, BACKOFF

    with Flaky(failures=2) as server, API(server.url, token="t", retries=4) as api:
        assert api.get("things/") == {"ok": 3}
    assert [m for m, _ in server.seen] == ["GET"] * 3
    first, second = server.gaps()
    assert first >= BACKOFF and second >= 2 * BACKOFF  # each wait at least as long as its step


def test_retries_run_out_and_the_last_answer_is_the_error():
    from paddlectl.api import API
    from paddlectl.errors import APIError

    with Flaky(failures=10) as server, API(server.url, token="t", retries=2) as api, \
            pytest.raises(APIError) as failed:
        api.get("things/")
    assert failed.value.status == 503 and len(server.seen) == 3


def test_no_retries_means_one_request():
    from paddlectl.api import API
    from paddlectl.errors import APIError

    with Flaky(failures=1) as server, API(server.url, token="t", retries=0) as api, pytest.raises(APIError):
        api.get("things/")
    assert len(server.seen) == 1


def test_a_post_the_server_dropped_is_not_sent_again_but_a_get_is():
    from paddlectl.api import API
    from paddlectl.errors import ConnectionFailed

    with Flaky(failures=1, drop=True) as server, API(server.url, token="t", retries=3) as api:
        with pytest.raises(ConnectionFailed):
            api.post("things/", json={"a": 1})
        assert [m for m, _ in server.seen] == ["POST"]
        server.failures = 2
        assert api.get("things/") == {"ok": 3}
    assert [m for m, _ in server.seen] == ["POST", "GET", "GET"]
