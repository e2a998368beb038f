"""The service's side of the launcher (launcher/): one request per connection over its unix socket.

Every root operation of the local backend goes through here; the launcher checks each request
itself. A launcher that is not (yet) listening is waited for briefly, as at start-up, when the
service's processes and the launcher start side by side, and so is one whose backlog of
connections is full (a burst of launches on a busy machine).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from django.conf import settings

CONNECT_WAIT = 10.0
TIMEOUT = 120.0


class LauncherError(Exception):
    """The launcher refused the request, or could not be reached; the message says why."""


def ask(op: str, **args: Any) -> Any:
    """Send one request; its result, or LauncherError with the launcher's answer."""
    path = str(settings.LAUNCHER_SOCKET)
    deadline = time.monotonic() + CONNECT_WAIT
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        while True:
            try:
                sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError, BlockingIOError) as e:
                if time.monotonic() > deadline:
                    if isinstance(e, BlockingIOError):
                        raise LauncherError(f"the launcher on {path} is too busy to take the request "
                                            f"({CONNECT_WAIT:.0f} s)") from None
                    raise LauncherError(f"the launcher is not running (no answer on {path}: {e.strerror}); "
                                        "`make run` starts it, or run `python -m paddleweb.launcher`") from None
                time.sleep(0.05)
        sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
        with sock.makefile("rb") as answer:
            line = answer.readline()
    if not line:
        raise LauncherError(f"the launcher closed the connection without answering {op}")
    reply = json.loads(line)
    if not reply.get("ok"):
        raise LauncherError(reply.get("error") or "refused")
    return reply.get("result")
