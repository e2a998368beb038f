"""Fixtures every test module shares: named users (alice, bob, staff), the default datacenter,
API clients authenticated with real tokens, per-test storage directories, and — for tests that
need the whole system — a Celery worker and the jobs watcher running in threads."""

import os
import shutil
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from paddleweb import embedded_redis


@pytest.fixture(scope="session", autouse=True)
def redis_server():
    """With REDIS_URL unset, the bundled Redis serves the test session (as for a newcomer)."""
    proc = embedded_redis.ensure_running(settings.EMBEDDED_REDIS_SOCKET) if settings.EMBEDDED_REDIS_SOCKET else None
    yield
    if proc:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session", autouse=True)
def _end_leftover_sessions(django_db_setup, django_db_blocker):
    """A Celery worker thread opens a connection at start-up (Django's system checks) that no task
    closes; on PostgreSQL it would stop the test database from being dropped. At the very end,
    after every test, end whatever sessions are left."""
    yield
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture(autouse=True)
def storage_dirs(settings, tmp_path):
    """Each test gets empty PFS, job and log directories (ids restart between tests).
    Runtime virtualenvs stay shared: building paddlepaddle's once is enough."""
    settings.PFS_ROOT = tmp_path / "pfs"
    settings.JOBS_ROOT = tmp_path / "jobs"
    settings.LOGS_ROOT = tmp_path / "logs"
    settings.VENVS_ROOT = settings.VAR_DIR / "venvs"
    yield tmp_path
    _drop_network_namespaces(settings.JOBS_ROOT)


def _drop_network_namespaces(jobs_root):
    """A test that ends its job with a kill and no final observation leaves the job's network
    namespace behind (in service the watcher drops it); drop this test's, so none pile up."""
    from jobs.backends.local import netns

    tag = netns.name_prefix(jobs_root)
    if netns.NETNS_DIR.is_dir():
        for entry in netns.NETNS_DIR.iterdir():
            if entry.name.startswith(tag):
                netns.remove(entry.name)


@pytest.fixture
def datacenter(db):
    from accounts.models import Datacenter
    from quotas.models import Quota

    dc = Datacenter.objects.create(name="local", backend="local")
    Quota.objects.create(datacenter=dc, user=None)
    return dc


def _user(name, **extra):
    return get_user_model().objects.create_user(name, f"{name}@example.com", "password", **extra)


@pytest.fixture
def alice(db, datacenter):
    return _user("alice")


@pytest.fixture
def bob(db, datacenter):
    return _user("bob")


@pytest.fixture
def staff(db, datacenter):
    return _user("staff", is_staff=True)


def token_client(user):
    from rest_framework.test import APIClient

    from accounts.services import issue_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(user)}")
    return client


@pytest.fixture
def alice_api(alice):
    return token_client(alice)


@pytest.fixture
def bob_api(bob):
    return token_client(bob)


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
def running_system(worker: bool = True):
    """A real Celery worker and the jobs watcher, in threads of this process (they share the
    test database; use with transactional_db / live_server)."""
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_postrun

    from jobs.management.commands.watch_jobs import WatchLoop
    from paddleweb.celery import app

    stop = threading.Event()
    thread = threading.Thread(target=WatchLoop().run, args=(stop, 0.2), name="watcher", daemon=True)
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
        thread.join(10)


@pytest.fixture
def system(transactional_db):
    with running_system():
        yield


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason="Chromium is not installed (apt-get install chromium)")


@pytest.fixture
def page(live_server, alice, monkeypatch):
    """Debian's Chromium, driven by Playwright, logged in to the live server as alice."""
    with logged_in_browser(live_server.url, monkeypatch) as page:
        yield page


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
    thread, with the Procfile's HTTP protocol (paddleweb.server); with `zero_copy=False`, with
    stock uvicorn's, which offers no zero-copy extension (the apps' fallback path)."""

    def __init__(self, application=None, *, zero_copy: bool = True):
        import uvicorn

        if application is None:
            from paddleweb.asgi import application

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, lifespan="off",
                                http="paddleweb.server:HttpProtocol" if zero_copy else "httptools",
                                log_level="warning", access_log=False)
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


@pytest.fixture
def zero_copy_calls(monkeypatch):
    """The zero-copy loops paddleweb.server ran, in order: ("sendfile", offset, count) for a
    response span and ("splice", bytes) for a request body."""
    from paddleweb import server

    seen = []
    real_send, real_store = server._send_file, server._store_body

    def send_file(sock, fd, offset, count):
        seen.append(("sendfile", offset, count))
        return real_send(sock, fd, offset, count)

    def store_body(head, sock, fd, offset, remaining):
        seen.append(("splice", len(head) + remaining))
        return real_store(head, sock, fd, offset, remaining)

    monkeypatch.setattr(server, "_send_file", send_file)
    monkeypatch.setattr(server, "_store_body", store_body)
    return seen
