"""The launcher's socket: one JSON request per connection, from the service account only."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import struct
from typing import Any

from .ops import Launcher
from .paths import Refused

log = logging.getLogger("launcher")
MAX_REQUEST = 4 << 20
TIMEOUT = 30.0


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
        self.request.settimeout(TIMEOUT)
        line = self.rfile.readline(MAX_REQUEST + 1)
        try:
            if len(line) > MAX_REQUEST:
                raise Refused("request too large")
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
        # Bound under a temporary name and renamed once it listens: the socket's name appears only
        # when a connection to it is taken (between bind and listen a caller was refused).
        staging = f"{path}.{os.getpid()}.tmp"
        for stale in (path, staging):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)  # left by a launcher that died (a link is removed, never followed)
        old = os.umask(0o177)  # born 0600: nobody but its owner between bind and chown
        try:
            super().__init__(staging, Handler)
        finally:
            os.umask(old)
        try:
            os.chown(staging, service_uid, -1, follow_symlinks=False)
            os.rename(staging, path)
        except OSError:
            self.server_close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staging)
            raise
