"""Helpers every test module may import (fixtures live in conftest.py): waiting on a condition,
packages in a user's storage, API clients with real tokens, a running worker and watcher, a live
uvicorn server, a logged-in Chromium, the processes of a local job, and a very deep directory."""

from __future__ import annotations

import gc
import hashlib
import hmac
import os
import shutil
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

import psutil
import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from jobs.models import Job


# Python for a job's trainer, as real trainers do: reach every parameter server first (so each has
# started before the trainers end and the pservers are stopped, however slow the machine). The
# script it goes into imports os, socket and time.
REACH_PSERVERS = """
deadline = time.monotonic() + 120
for endpoint in filter(None, os.environ.get("PADDLE_PSERVERS_IP_PORT_LIST", "").split(",")):
    host, port = endpoint.rsplit(":", 1)
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
"""


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str | Callable[[], str] = "condition",
             tick: Callable[[], object] | None = None, interval: float = 0.05) -> Any:
    """The first truthy value of `predicate()`, polled until a generous deadline (never a fixed
    sleep); `tick` runs before each poll (e.g. one step of a watcher the test drives). `what` names
    the condition in the failure, or is called then to describe it (e.g. with a process's output)."""
    deadline = time.monotonic() + timeout
    while True:
        if tick:
            tick()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def token_client(user):
    from rest_framework.test import APIClient

    from accounts.services import issue_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(user)}")
    return client


def make_package(user, name: str, files: dict[str, str], datacenter: str = "local") -> str:
    """Write a package into the user's PFS home under jobs/<name>/; returns its PFS path."""
    from pfs.paths import home

    target = home(user, datacenter).child("jobs", name)
    for rel, text in files.items():
        path = target.disk / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target.virtual


def close_task_connection(**kwargs):
    from django.db import connection

    connection.close()


@contextmanager
def running_system(worker: bool = True, watcher: bool = True):
    """A real Celery worker and the jobs watcher, in threads of this process (they share the
    test database; use with transactional_db / live_server). Without the watcher, the test
    moves its jobs itself."""
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_postrun

    from jobs.watch import WatchLoop
    from paddleweb.celery import app

    stop = threading.Event()
    thread = threading.Thread(target=WatchLoop().run, args=(stop, 0.2), name="watcher", daemon=True)
    if watcher:
        thread.start()
    # Pool threads would keep their database connections open past the test (on PostgreSQL that
    # blocks dropping the test database): each task closes its thread's connection when done.
    task_postrun.connect(close_task_connection)
    try:
        if worker:
            with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=30):
                yield
        else:
            yield
    finally:
        task_postrun.disconnect(close_task_connection)
        stop.set()
        if watcher:
            thread.join(10)


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason="Chromium is not installed (apt-get install chromium)")


@contextmanager
def logged_in_browser(base_url: str, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls the test makes
    # beside it are still plain synchronous calls (Django documents this switch for such tools).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.set_default_timeout(30_000)
        page.goto(f"{base_url}/login/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "password")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base_url}/jobs/")
        yield page
        browser.close()


class LiveASGI:
    """uvicorn serving an ASGI application (paddleweb's by default) on a free loopback port, in a
    thread, with the Procfile's HTTP protocol (core.server) and uncompressed websockets; with
    `zero_copy=False`, with stock uvicorn's, which offers no zero-copy extension (the apps'
    fallback path)."""

    def __init__(self, application=None, *, zero_copy: bool = True):
        import uvicorn

        if application is None:
            from paddleweb.asgi import application

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, lifespan="off",
                                http="core.server:HttpProtocol" if zero_copy else "httptools",
                                ws_per_message_deflate=False, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(20)


def get_one_by_one(live: LiveASGI, token: str, count: int, path: str = "/api/v2/jobs/") -> None:
    """`count` GETs of `path` with the token, each after the one before has given its request thread
    back to the service's application (core/request_threads.py), so that thread can serve the next."""
    import httpx

    from paddleweb.asgi import request_threads as threads

    busy = threads.busy  # requests of earlier tests that never ended, if any
    with httpx.Client(base_url=live.url, timeout=60, headers={"Authorization": f"Token {token}"}) as http:
        for _ in range(count):
            assert http.get(path).status_code == 200
            wait_for(lambda: threads.busy == busy, 30, "the request to give its thread back")


def job_processes(job: Job) -> list[psutil.Process]:
    """Every live process belonging to the job: its keepers and anything they started."""
    from django.conf import settings

    from jobs.backends.local.keepers import KEEPER

    root = str(settings.JOBS_ROOT / str(job.pk))
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            cwd = proc.info["cwd"] or ""
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if (str(KEEPER) in cmdline and root in cmdline) or cwd.startswith(root):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.NoSuchProcess:  # ended since it was listed
                continue
    return found


def programs(job: Job, needle: str = "train.py") -> list[psutil.Process]:
    """The job's training programs themselves (python running `needle`), not the keepers, sandboxes
    or forked keeper children around them."""
    found = []
    for proc in job_processes(job):
        try:
            if proc.name().startswith("python") and needle in " ".join(proc.cmdline()) \
                    and "keeper.py" not in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def wait_state(job: Job, states, timeout=60.0) -> Job:
    states = [states] if isinstance(states, str) else states

    def check():
        job.refresh_from_db()
        return job.state in states

    wait_for(check, timeout, what=f"job {job.name} to reach {states} (now {job.state}: {job.message[-500:]})")
    return job


def make_job(user, datacenter, name: str = "fit", state: str = "Running") -> Job:
    """A job row in `state` with no processes behind it (for tests that move jobs themselves)."""
    from jobs.models import Job

    return Job.objects.create(user=user, datacenter=datacenter, name=name, state=state, mode="ps", pservers=1,
                              trainers=1, package=f"/pfs/local/home/{user.username}/pkg", entry="python train.py")


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """A webhook's signature computed as a receiver would, independently of notifications.delivery."""
    return "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def replica_program(job: Job, replica_name: str, needle: str) -> psutil.Process | None:
    """The process of a local job's replica whose command line holds `needle` (its training
    program, not the keeper or sandbox around it: the deepest such process), or None."""
    from jobs.backends.local.backend import LocalBackend

    role, index = replica_name.split("-")
    replica = job.replicas.get(role=role, index=int(index))
    state = str(LocalBackend(job.datacenter).state_dir(replica))
    for keeper in job_processes(job):
        try:
            if state not in " ".join(keeper.cmdline()):
                continue
            found = [p for p in keeper.children(recursive=True) if needle in " ".join(p.cmdline())]
        except psutil.NoSuchProcess:
            continue
        return found[-1] if found else None
    return None


def run_until_done(job: Job, timeout: float = 30) -> Job:
    """Drive a local job as the worker and watcher would: launch, then observe until it ends."""
    from jobs.lifecycle.sync import sync_job
    from jobs.tasks import launch_job

    launch_job(job.pk)

    def done() -> bool:
        # Processes first: a keeper gone by now has recorded its exit, which this sync then sees.
        gone = not job_processes(job)
        job.refresh_from_db()
        sync_job(job)
        return job.state in ("Succeeded", "Failed", "Killed") and gone

    wait_for(done, timeout, what=lambda: f"job {job.name} to end (state {job.state}: {job.message})")
    return job



ROOT = os.geteuid() == 0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fresh_environment(tmp_path, **environment: str) -> dict[str, str]:
    """An environment of nothing but PATH, a home and a state directory under `tmp_path`, the
    settings module and `environment`: the service's settings as a new machine would read them."""
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PADDLECLOUD_VAR": str(tmp_path / "var"),
            "DJANGO_SETTINGS_MODULE": "paddleweb.settings", **environment}


def in_fresh_settings(tmp_path, code: str, **environment: str) -> str:
    """The last line `code` prints in a new interpreter with Django set up in `fresh_environment`."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", f"import django\ndjango.setup()\n{code}"], cwd=REPO,
                         env=fresh_environment(tmp_path, **environment), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()[-1]


class LauncherProcess:
    """A real `python -m launcher` (launcher/) on a socket of its own: as root, the root launcher
    `make run` starts; as a normal user, the rootless one. `job_uids` None picks a free range of
    its own (a test run beside a dev server, or beside another run, must not share one)."""

    def __init__(self, base, roots: dict, *extra: str, service_uid: int | None = None,
                 job_uids: str | None = None, env: dict | None = None, registry=None) -> None:
        import subprocess
        import sys
        from pathlib import Path

        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.sock, self.log, self.state = self.base / "launcher.sock", self.base / "launcher.log", self.base / "state"
        self.job_uids, self.roots = job_uids, roots
        for _ in range(50):
            if job_uids is None:  # a slot of its own, from this process's pid; the next if held
                first = 400_000 + (os.getpid() * 7 + _) % 997 * 10_000
                self.job_uids = f"{first}-{first + 9_999}"
            uid = os.geteuid() if service_uid is None else service_uid
            cmd = [sys.executable, "-m", "launcher", "--socket", str(self.sock), "--state-dir", str(self.state),
                   "--service-uid", str(uid), "--job-uids", self.job_uids,
                   *[a for name, path in roots.items() for a in (f"--{name}-root", str(path))], *extra]
            if registry:
                cmd += ["--uid-registry", str(registry)]
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=open(self.log, "wb"),  # noqa: SIM115 - the child's
                                         stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})
            wait_for(lambda: self.sock.exists() or self.proc.poll() is not None, 30, what=self.output)
            if self.proc.poll() is None or job_uids is not None or "another PaddleCloud" not in self.output():
                return
        raise AssertionError(f"no free job uid range for a test launcher: {self.output()}")

    def ready(self) -> LauncherProcess:
        assert self.proc.poll() is None, self.output()
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def drop_job_networks(launcher: LauncherProcess, jobs_root) -> None:
    """What a test's killed jobs left (in service the watcher drops it): their network namespaces
    (as root) or the processes holding them (rootless)."""
    import signal
    import subprocess

    from launcher import netns

    prefix = netns.name(str(jobs_root), "")
    if ROOT and netns.NETNS_DIR.is_dir():
        for entry in netns.NETNS_DIR.iterdir():
            if entry.name.startswith(prefix):
                subprocess.run(["ip", "netns", "delete", entry.name], capture_output=True)
    for pid_file in (launcher.state / "netns").glob(f"{prefix}*.pid"):
        with suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        pid_file.unlink(missing_ok=True)


def request_garbage() -> Counter[str]:
    """The objects of this project's, Django's and DRF's that a full collection finds only in
    reference cycles, by type. Other threads' cyclic garbage (a server of an earlier test shutting
    down, a Redis client) is not counted, nor is a thread's database connection (Django's wrapper
    and its parts name each other), left by any thread that ends meanwhile: one per thread, not
    per request (an idle request thread ends: core/request_threads.py)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = Counter(name for name in (f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
                        if name.split(".")[0] in REQUEST_MODULES and not name.startswith(THREAD_DATABASE))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


THREAD_DATABASE = ("django.db.backends.", "django.db.utils.")  # a connection's wrapper and its parts
REQUEST_MODULES = {"django", "rest_framework", "accounts", "core", "jobs", "pfs", "quotas", "legacy",
                   "notifications", "paddleweb"}


# Deeper than os.fwalk and shutil.rmtree can go (they recurse per level): what `mkdir d; cd d` in a
# loop makes in a job in well under a second (no PATH_MAX applies).
DEEP = sys.getrecursionlimit() + 500
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


@contextmanager
def deep_chain(top: Path, depth: int = DEEP, leaf: bytes = b"") -> Iterator[Path]:
    """top/d/d/.../d, `depth` levels made by descriptor as a job would, `leaf` written to a file in
    the deepest; whatever is left of it is removed on the way out, by the test itself (neither
    pytest's temporary directories nor shutil.rmtree can)."""
    top.mkdir(parents=True)
    try:
        fd = os.open(top, _DIR)
        try:
            for _ in range(depth):
                os.mkdir("d", dir_fd=fd)
                child = os.open("d", _DIR, dir_fd=fd)
                os.close(fd)
                fd = child
            if leaf:
                out = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
                os.write(out, leaf)
                os.close(out)
        finally:
            os.close(fd)
        yield top
    finally:
        _remove_chain(top)


def _remove_chain(top: Path) -> None:
    """Removed level by level from the bottom, one descriptor open at a time (a test may run
    with 1,024 of them: fewer than the chain's levels), climbing back through '..'."""
    if not top.is_dir():
        return
    fd, depth = os.open(top, _DIR), 0
    try:
        while True:
            try:
                child = os.open("d", _DIR, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                break
            os.close(fd)
            fd, depth = child, depth + 1
        for _ in range(depth):
            for name in os.listdir(fd):
                if name != "d":
                    os.unlink(name, dir_fd=fd)
            parent = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir("d", dir_fd=fd)
    finally:
        os.close(fd)
    shutil.rmtree(top)
