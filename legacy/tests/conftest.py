"""The legacy protocol served for real: uvicorn with the Procfile's protocol and the whole ASGI
stack (body limits included), spoken to over HTTP as the old client speaks it."""

from __future__ import annotations

import httpx
import pytest

from tests.support import LiveASGI

from .recorded import Exchange, check_shape

BOUNDARY = "8d7b0e5709d756e21e971ff4d9ac3b20"


@pytest.fixture
def live(transactional_db):
    with LiveASGI() as server:
        yield server


class OldClient:
    """Requests shaped exactly as the compiled client sends them (protocol-v1.md)."""

    def __init__(self, base_url: str, token: str | None = None):
        self.http = httpx.Client(base_url=base_url, timeout=60, follow_redirects=False)
        self.token = token

    def login(self, username: str, password: str = "password") -> httpx.Response:
        r = self.http.post("/api-token-auth/", json={"username": username, "password": password})
        if r.status_code == 200:
            self.token = r.json()["token"]
        return r

    def send(self, method: str, path: str, **kw) -> httpx.Response:
        headers = kw.pop("headers", {})
        if self.token:
            headers.setdefault("Authorization", f"Token {self.token}")
        if "json" in kw and method in ("DELETE", "GET"):  # httpx sends bodies on these only this way
            import json

            kw["content"] = json.dumps(kw.pop("json")).encode()
            headers.setdefault("Content-Type", "application/json")
        return self.http.request(method, path, headers=headers, **kw)

    def replay(self, exchange: Exchange, **subs) -> httpx.Response:
        """Send one recorded request (with `{name}` placeholders filled) and check the answer's
        status line and JSON shape against the recording."""
        r = self.send(exchange.method, exchange.path.format(**subs), **exchange.request(subs))
        assert r.status_code == exchange.status, (exchange.path, r.status_code, r.text[:500])
        if exchange.shape is not None:
            check_shape(r.json(), exchange.shape, where=exchange.path)
        return r

    def upload_chunk(self, path: str, offset: int, data: bytes, chunksize: int) -> httpx.Response:
        from urllib.parse import urlencode

        name = urlencode({"chunksize": chunksize, "offset": offset, "path": path})
        body = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="chunk"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()
        return self.send("POST", "/api/v1/pfs/storage/chunks", content=body,
                         headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})

    def download_chunk(self, path: str, offset: int, chunksize: int) -> tuple[str, bytes]:
        """(the part's filename, its bytes) of one chunk, parsed as the client parses it."""
        r = self.send("GET", "/api/v1/pfs/storage/chunks",
                      params={"chunksize": chunksize, "offset": offset, "path": path})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == f"multipart/form-data; boundary={BOUNDARY}"
        head, rest = r.content.split(b"\r\n\r\n", 1)
        assert head.startswith(f"--{BOUNDARY}\r\n".encode()) and b'name="chunk"' in head
        filename = head.split(b'filename="', 1)[1].split(b'"', 1)[0].decode()
        tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        assert rest.endswith(tail)
        return filename, rest[: -len(tail)]


@pytest.fixture
def old_client(live):
    def make(user=None) -> OldClient:
        c = OldClient(live.url)
        if user is not None:
            assert c.login(user.username).status_code == 200
        return c
    return make
