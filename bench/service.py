"""The service as users get it, for the benches: `python -m paddleweb.run` (what `make run` starts)
on a state directory of its own and a free port, at its defaults, spoken to over HTTP with a token.

With DATABASE_URL set, the service gets a fresh database of its own on that server (named after
the URL's, with `_bench<pid>` added), dropped at the end; otherwise SQLite in the state directory.
Redis is the bundled one either way. Nothing else is changed: WATCH_INTERVAL, worker concurrency,
middleware, logging are the service's own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PASSWORD = "bench-password-not-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _admin_url(url: str) -> tuple[str, str]:
    """(URL of the maintenance database `postgres`, name of the bench's own database)."""
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'paddlecloud'}_bench{os.getpid()}"
    return urlunsplit(parts._replace(path="/postgres")), name


def _psql(admin: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


class Service:
    """Start with `with Service() as svc:`; `svc.api` is an httpx client with the admin's token."""

    def __init__(self, env: dict[str, str] | None = None, name: str = "bench"):
        self.var = Path(tempfile.mkdtemp(prefix=f"pc-{name}-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # A job uid range of its own: the launcher refuses one that another instance on this host
        # holds (a dev server, another bench). Which uids jobs run as costs nothing either way.
        first = 30_000_000 + os.getpid() % 9973 * 10_000
        self.env = {**os.environ, "PADDLECLOUD_VAR": str(self.var), "PADDLECLOUD_PORT": str(self.port),
                    "SITE_URL": self.url, "JOB_UIDS": f"{first}-{first + 9_999}", **(env or {})}
        self.env.pop("DJANGO_SETTINGS_MODULE", None)
        self.env.pop("REDIS_URL", None)  # the bundled Redis: no queue shared with anything else
        self.database: tuple[str, str] | None = None
        if self.env.get("DATABASE_URL", "").startswith("postgres"):
            admin, db = _admin_url(self.env["DATABASE_URL"])
            self.database = (admin, db)
            self.env["DATABASE_URL"] = urlunsplit(urlsplit(self.env["DATABASE_URL"])._replace(path=f"/{db}"))
        self.proc: subprocess.Popen | None = None
        self.token = ""
        self.api: httpx.Client | None = None

    # --- life -----------------------------------------------------------------------------
    def __enter__(self) -> Service:
        if self.database:
            _psql(self.database[0], f'CREATE DATABASE "{self.database[1]}"')
        # The admin's password is ours (bootstrap prints a random one otherwise); `make run` then
        # migrates and bootstraps again, finding both done.
        self.manage("migrate", "--noinput", "-v0")
        self.manage("bootstrap", "--password", PASSWORD)
        self.log = open(self.var / "service.log", "wb")
        self.proc = subprocess.Popen([PYTHON, "-m", "paddleweb.run"], cwd=ROOT, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_healthy()
        res = httpx.post(f"{self.url}/api/v2/auth/token/", json={"username": "admin", "password": PASSWORD},
                         timeout=60)
        res.raise_for_status()
        self.token = res.json()["token"]
        self.api = self.client(self.token)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.api is not None:
            self.api.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        if self.database:
            _psql(self.database[0], f'DROP DATABASE IF EXISTS "{self.database[1]}" WITH (FORCE)')
        subprocess.run(["rm", "-rf", str(self.var)], check=False)

    def _wait_healthy(self, timeout: float = 180) -> None:
        """Until the web answers and the worker and watcher have said they are alive."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SystemExit(f"the service exited ({self.proc.returncode}); see {self.var}/service.log:\n"
                                 + (self.var / "service.log").read_text()[-3000:])
            try:
                if httpx.get(f"{self.url}/api/v2/health/", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the service was not healthy within {timeout} s")

    # --- helpers --------------------------------------------------------------------------
    def manage(self, *args: str, stdin: str | None = None) -> str:
        """A manage.py command against the service's database (setup only, never measured)."""
        out = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, check=True, input=stdin,
                             stdout=subprocess.PIPE, text=True)
        return out.stdout

    def django(self, code: str) -> str:
        """Python run by `manage.py shell` (seeding, settings of a datacenter): its stdout."""
        return self.manage("shell", "-c", code)

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Token {token}"}, timeout=120)

    def user_token(self, username: str) -> str:
        """A token for a new user `username` (created with the admin's password)."""
        self.django("from django.contrib.auth import get_user_model as g; "
                    f"g().objects.create_user({username!r}, password={PASSWORD!r})")
        res = httpx.post(f"{self.url}/api/v2/auth/token/", json={"username": username, "password": PASSWORD},
                         timeout=60)
        res.raise_for_status()
        token: str = res.json()["token"]
        return token

    def processes(self) -> list[psutil.Process]:
        """Every process of the tree `make run` started (jobs' replicas included, if any run)."""
        assert self.proc is not None
        top = psutil.Process(self.proc.pid)
        return [top, *top.children(recursive=True)]

    def cpu_seconds(self) -> float:
        """User + system CPU the tree's processes have used so far."""
        assert self.proc is not None
        return tree_cpu(self.proc.pid)


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by process `pid` and its children (user + system)."""
    total = 0.0
    top = psutil.Process(pid)
    for p in [top, *top.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def load() -> str:
    """The load average, said with every figure (a busy machine slows everything)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))
