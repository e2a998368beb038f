"""A small HTTP server that plays a hostile (or broken) PaddleCloud: the listings, file bodies,
headers and error bodies a test sets, and a record of every request it got. Loopback only."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    length: bool = True  # send a Content-Length (else the body ends when the connection closes)
    repeat: int = 1  # the body this many times over: an answer too big to hold


class HostileServer:
    def __init__(self) -> None:
        self.listings: dict[str, list[dict[str, Any]]] = {}  # files/?path=...
        self.files: dict[str, bytes] = {}  # files/content/?path=...
        self.answers: dict[str, Callable[[dict[str, str]], Answer]] = {}  # by URL path: anything else
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.sent = 0  # bytes of bodies written
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.requests.append((self.path, dict(self.headers)))
                answer = outer.answer(self.path, dict(self.headers))
                self.send_response(answer.status)
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                if answer.length:
                    self.send_header("Content-Length", str(len(answer.body) * answer.repeat))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                try:
                    for _ in range(answer.repeat):
                        self.wfile.write(answer.body)
                        outer.sent += len(answer.body)
                except OSError:  # the client stopped reading
                    self.close_connection = True

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def answer(self, path: str, headers: dict[str, str]) -> Answer:
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if parts.path in self.answers:
            return self.answers[parts.path](headers)
        if parts.path == "/api/v2/files/" and query.get("path") in self.listings:
            return json_answer(self.listings[query["path"]])
        if parts.path == "/api/v2/files/content/" and query.get("path") in self.files:
            return Answer(body=self.files[query["path"]], headers={"ETag": '"e1"'})
        return json_answer({"detail": "Not found."}, 404)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def json_answer(data: Any, status: int = 200) -> Answer:
    return Answer(status, json.dumps(data).encode(), {"Content-Type": "application/json"})


def file_entry(path: str, size: int = 0, kind: str = "file") -> dict[str, Any]:
    return {"name": path.rsplit("/", 1)[-1], "path": path, "type": kind, "size": size}
