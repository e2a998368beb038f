"""The launcher's socket: one JSON request per connection, from the service account only."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import stat
import struct
import tempfile
import threading
import time
from typing import Any

from .ops import Launcher
from .paths import Refused

log = logging.getLogger("launcher")
MAX_REQUEST = 4 << 20
TIMEOUT = 30.0
SOCKET_NAME = "launcher.sock"
MAX_HANDLERS = 64


def peer_uid(sock: socket.socket) -> int:
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(uid)


class Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        uid = peer_uid(self.request)
        if uid != self.server.service_uid:
            log.warning("refused a connection from uid %d: only the service account (uid %d) may ask",
                        uid, self.server.service_uid)
            self._answer({"ok": False, "error": f"refused: uid {uid} is not the service account"})
            return
        try:
            line = self._request_line()
            try:
                req = json.loads(line)
            except ValueError:
                raise Refused("not a JSON request") from None
            answer: dict[str, Any] = {"ok": True, "result": self.server.launcher.handle(req)}
        except Refused as e:
            log.warning("refused %s: %s", req.get("op") if isinstance(locals().get("req"), dict) else "?", e)
            answer = {"ok": False, "error": str(e)}
        except Exception:
            log.exception("request failed")
            answer = {"ok": False, "error": "the launcher failed on this request: see its log"}
        self._answer(answer)

    def _request_line(self) -> bytes:
        """The request, whole within TIMEOUT however it trickles in (a timeout per read would let a
        byte every 29 s hold a thread for ever)."""
        deadline = time.monotonic() + TIMEOUT
        data = bytearray()
        while b"\n" not in data:
            if len(data) > MAX_REQUEST:
                raise Refused("request too large")
            left = deadline - time.monotonic()
            if left <= 0:
                raise Refused(f"the request was not sent within {TIMEOUT:.0f} s")
            self.request.settimeout(left)
            try:
                chunk = self.request.recv(1 << 16)
            except TimeoutError:
                continue  # the deadline above says so
            if not chunk:
                break
            data += chunk
        return bytes(data.partition(b"\n")[0])

    def _answer(self, answer: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the caller went away
            self.wfile.write(json.dumps(answer).encode() + b"\n")


class Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    # A launch asks for all of a job's replicas at once, and jobs launch side by side: socketserver's
    # default backlog of 5 turned connections away on a busy machine (EAGAIN at the caller).
    request_queue_size = 128

    def __init__(self, path: str, launcher: Launcher, service_uid: int) -> None:
        self.launcher, self.service_uid = launcher, service_uid
        # At most MAX_HANDLERS requests are served at a time (a thread each); the rest wait in the
        # listen backlog, where the service's client waits for room (launcher_client.CONNECT_WAIT).
        self._slots = threading.BoundedSemaphore(MAX_HANDLERS)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # left by a launcher that died (a link is removed, never followed)
        # Bound in a directory of this process's alone, held open, and renamed into place once it
        # listens: its name appears only when a connection to it is taken (between bind and listen
        # a caller was refused), and the socket's directory (the service's) never holds the name
        # chowned, which the service could have swapped for a link to a root file meanwhile.
        staging = tempfile.mkdtemp(prefix=".launcher-", dir=os.path.dirname(path) or ".")
        dir_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            st = os.fstat(dir_fd)
            if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o700:
                raise OSError(f"{staging} was replaced while the launcher's socket was made")
            super().__init__(f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}", Handler)
            try:
                os.chmod(SOCKET_NAME, 0o600, dir_fd=dir_fd)
                os.chown(SOCKET_NAME, service_uid, -1, dir_fd=dir_fd, follow_symlinks=False)
                os.rename(SOCKET_NAME, path, src_dir_fd=dir_fd)
            except OSError:
                self.server_close()
                raise
        finally:
            os.close(dir_fd)
            with contextlib.suppress(OSError):
                os.rmdir(staging)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._slots.acquire()  # released in shutdown_request, which socketserver calls once per request
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        try:
            super().shutdown_request(request)
        finally:
            self._slots.release()
