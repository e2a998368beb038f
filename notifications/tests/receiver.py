"""A real local HTTP(S) server standing in for a user's webhook receiver: it records every request
and answers with the status codes it is told, in turn (200 once they run out)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    answers: list[int] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)


@contextmanager
def receiver(answers: list[int] | None = None, tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    state = Receiver(url="", answers=list(answers or []))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                state.requests.append(Received(self.path, dict(self.headers), body))
                code = state.answers.pop(0) if state.answers else 200
            self.send_response(code)
            self.end_headers()
            self.wfile.write(b"ok " * 1000)  # longer than what the delivery log keeps

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    state.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_port}/hook?from=paddlecloud"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def trickling_receiver() -> Iterator[str]:
    """A receiver that answers one byte of its head every 0.2 s, never finishing (slowloris)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10000:
                if stop.wait(0.2):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        stop.set()
        listener.close()
        thread.join(10)
