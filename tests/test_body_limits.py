"""Request bodies are bounded from the head alone (core/body_limits.py), against the real
application served by uvicorn with the Procfile's protocol. What is checked is what a hostile
client sees on the wire: the refusal arrives while it has sent only a small part of its body,
and the server then closes the connection instead of reading on."""

import http.client
import json
import select
import socket

import pytest
from django.test import Client

from accounts.services import issue_token
from tests.support import LiveASGI

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 2**20


@pytest.fixture
def live():
    with LiveASGI() as live:
        yield live


def _response(s: socket.socket) -> tuple[int, dict, bytes]:
    resp = http.client.HTTPResponse(s)
    resp.begin()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()


def _send_until_closed(s: socket.socket, limit: int) -> int:
    """Push body bytes until the server closes the connection; the bytes it took. Fails if it
    keeps taking them past `limit` (it reads the body) or stops without closing."""
    s.settimeout(20)
    block, sent = b"x" * MiB, 0
    try:
        while sent < limit:
            sent += s.send(block)
    except (BrokenPipeError, ConnectionResetError):
        return sent
    raise AssertionError(f"the server took {sent} bytes of the body")


def _big_request(port: int, method: str, path: str, headers: str = "", first_part: int = 16 * 1024):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {256 * MiB}\r\n"
              f"Content-Type: application/octet-stream\r\n{headers}\r\n".encode() + b"x" * first_part)
    return s


@pytest.mark.parametrize("method, path, status", [
    ("PUT", "/api/v2/files/content/?path=/pfs/local/home/alice/big", 401),
    ("PATCH", "/api/v2/uploads/0123456789abcdef/", 401),
    ("POST", "/api/v2/jobs/", 401),
    ("POST", "/files/-/mkdir/", 401),
    ("POST", "/login/", 413),
    ("POST", "/api/v2/auth/token/", 413),
])
def test_an_anonymous_256_mib_body_is_refused_before_it_is_read(live, alice, method, path, status):
    with _big_request(live.port, method, path) as s:
        code, headers, body = _response(s)
        assert code == status and headers["connection"] == "close"
        assert json.loads(body)["detail"]
        assert _send_until_closed(s, 64 * MiB) < 64 * MiB


def test_an_invalid_token_counts_as_no_login(live, alice):
    with _big_request(live.port, "PUT", "/api/v2/files/content/?path=/pfs/local/home/alice/big",
                      "Authorization: Token not-a-real-token\r\n") as s:
        assert _response(s)[0] == 401


def test_a_declared_length_over_the_logged_in_limit_is_refused_before_reading(live, alice, settings):
    settings.REQUEST_BODY_MAX = MiB
    with _big_request(live.port, "POST", "/api/v2/jobs/", f"Authorization: Token {issue_token(alice)}\r\n") as s:
        code, headers, body = _response(s)
        assert code == 413 and f"at most {MiB} bytes" in json.loads(body)["detail"]
        assert _send_until_closed(s, 64 * MiB) < 64 * MiB


def test_a_chunked_body_is_cut_off_at_the_limit(live, alice, settings):
    settings.REQUEST_BODY_MAX = MiB
    with socket.create_connection(("127.0.0.1", live.port)) as s:
        s.sendall(f"POST /api/v2/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                  f"Content-Type: application/json\r\nAuthorization: Token {issue_token(alice)}\r\n\r\n".encode())
        chunk = b"%x\r\n%s\r\n" % (64 * 1024, b" " * 64 * 1024)
        sent, reset = 0, False
        try:
            while not select.select([s], [], [], 0)[0]:  # until the answer is there
                assert sent < 64 * MiB, "no answer while the body grew past the limit"
                s.sendall(chunk)
                sent += 64 * 1024
        except (ConnectionResetError, BrokenPipeError):
            reset = True
        assert MiB <= sent < 64 * MiB
        try:
            code, headers, body = _response(s)
        except ConnectionResetError:
            # The server answered and closed while bytes we sent were still unread: the kernel
            # then resets the connection and may drop the answer. The body was cut off all the same.
            assert reset
        else:
            assert code == 413 and headers["connection"] == "close"


def test_a_logged_in_upload_still_works(live, alice):
    data = b"\x00\x01" * (3 * MiB // 2 + 7)
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
    conn.request("PUT", "/api/v2/files/content/?path=/pfs/local/home/alice/data.bin", body=data,
                 headers={"Authorization": f"Token {issue_token(alice)}",
                          "Content-Type": "application/octet-stream"})
    resp = conn.getresponse()
    assert resp.status == 201, resp.read()
    from pfs.paths import resolve

    assert resolve(alice, "/pfs/local/home/alice/data.bin").disk.read_bytes() == data


def test_a_session_body_reaches_django(live, alice):
    browser = Client()
    browser.force_login(alice)
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
    conn.request("POST", "/api/v2/files/mkdir/", body=b'{"path": "/pfs/local/home/alice/d"}',
                 headers={"Cookie": f"sessionid={browser.cookies['sessionid'].value}",
                          "Content-Type": "application/json"})
    resp = conn.getresponse()
    # Past the body check, Django's own checks apply: DRF wants the session's CSRF token.
    assert resp.status == 403 and "CSRF" in json.loads(resp.read())["detail"]


def test_login_takes_a_small_body_without_login(live, alice):
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
    conn.request("POST", "/api/v2/auth/token/", body=json.dumps({"username": "alice", "password": "password"}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["token"]
