"""A TCP proxy in front of the live server that a test can cut: drop every open connection,
refuse new ones for a while, or drop them once a number of bytes has passed. Loopback only."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class CuttableProxy:
    def __init__(self, upstream: str):
        host, port = upstream.split("//", 1)[-1].rstrip("/").rsplit(":", 1)
        self.upstream = (host if host != "localhost" else "127.0.0.1", int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.conns: set[socket.socket] = set()
        self.refuse_until = 0.0
        self.bytes_up = 0  # client -> server
        self.bytes_down = 0  # server -> client
        self.cut_up_at: int | None = None  # cut everything once bytes_up passes this
        self.cut_down_at: int | None = None
        self.cuts = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.refuse_until:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.update((client, server))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                with self.lock:
                    if up:
                        self.bytes_up += len(data)
                        trip = self.cut_up_at is not None and self.bytes_up >= self.cut_up_at
                    else:
                        self.bytes_down += len(data)
                        trip = self.cut_down_at is not None and self.bytes_down >= self.cut_down_at
                if trip:
                    self.cut_up_at = self.cut_down_at = None
                    self.cut()
                    break
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self.lock:
                self.conns.discard(src)
                self.conns.discard(dst)

    def cut(self, refuse_for: float = 0.0, count: bool = True) -> None:
        """Drop every open connection; refuse new ones for `refuse_for` seconds."""
        self.refuse_until = time.monotonic() + refuse_for
        with self.lock:
            conns = list(self.conns)
            self.cuts += count
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.cut(count=False)
        self.listener.close()
