"""Several web processes (`WEB_CONCURRENCY`, read by uvicorn as its --workers) serve the same port
from the Procfile's web command; when their supervisor is killed with -9, none outlives it."""

import contextlib
import os
import re
import signal
import subprocess
import sys

import httpx
import psutil
import pytest
from django.conf import settings

from tests.support import wait_for


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.django_db(transaction=True)
def test_web_workers_serve_and_end_with_their_supervisor(tmp_path):
    port = free_port()
    line = next(ln for ln in (settings.BASE_DIR / "Procfile").read_text().splitlines() if ln.startswith("web:"))
    command = re.sub(r"\$\{PADDLECLOUD_PORT:-\d+\}", str(port), line.split(":", 1)[1])
    env = {**os.environ, "WEB_CONCURRENCY": "2", "DJANGO_SETTINGS_MODULE": "paddleweb.settings"}
    env["PATH"] = f"{os.path.dirname(sys.executable)}:{env.get('PATH', '')}"  # the venv's uvicorn
    supervisor = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], cwd=settings.BASE_DIR, env=env,
                                  stdout=open(tmp_path / "web.log", "wb"),  # noqa: SIM115 - the child's
                                  stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/v2/version/", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        def workers() -> list[psutil.Process]:  # not multiprocessing's resource tracker
            return [p for p in psutil.Process(supervisor.pid).children()
                    if "resource_tracker" not in " ".join(p.cmdline())]

        wait_for(lambda: answers() and len(workers()) == 2, 120,
                 what=lambda: (tmp_path / "web.log").read_text()[-2000:])
        started = workers()
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait()
        wait_for(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in started), 30,
                 what="the web workers to end with their supervisor")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(supervisor.pid, signal.SIGKILL)
