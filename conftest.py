"""Fixtures every test module shares: named users (alice, bob, staff), the default datacenter,
API clients authenticated with real tokens, per-test storage directories, and — for tests that
need the whole system — a Celery worker and the jobs watcher running in threads."""

import os
import sys

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from core import embedded_redis
from tests.support import LauncherProcess, drop_job_networks, logged_in_browser, running_system, token_client


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The longest tests (real-PaddlePaddle runs, those marked slow) start first: in a parallel run
    they would otherwise come last and leave the other workers idle at the end. (pytest-django's
    own ordering, which sorts after this one and keeps it within each of its groups, stands.)"""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None and item.get_closest_marker("slow") is None)
    for item in items:
        if item.get_closest_marker("unit") and (item.get_closest_marker("django_db") or
                                                 {"db", "transactional_db", "live_server"} & set(item.fixturenames)):
            raise pytest.UsageError(f"{item.nodeid} is marked unit but uses the database")


def _unit_only(request) -> bool:
    """Whether this run holds only unit tests (pure functions: `make test-unit`): then the
    database, Redis and the launcher are never started, and a test that reached for the database
    would fail (pytest-django blocks it unless a test asks for it)."""
    return all(item.get_closest_marker("unit") for item in request.session.items)


@pytest.fixture(scope="session", autouse=True)
def redis_server(request):
    """With REDIS_URL unset, the bundled Redis serves the test session (as for a newcomer)."""
    if _unit_only(request):
        yield
        return
    proc = embedded_redis.ensure_running(settings.EMBEDDED_REDIS_SOCKET) if settings.EMBEDDED_REDIS_SOCKET else None
    yield
    if proc:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session", autouse=True)
def _end_leftover_sessions(request, django_db_blocker):
    """A Celery worker thread opens a connection at start-up (Django's system checks) that no task
    closes; on PostgreSQL it would stop the test database from being dropped. At the very end,
    after every test, end whatever sessions are left."""
    if _unit_only(request):
        yield
        return
    request.getfixturevalue("django_db_setup")
    yield
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture(scope="session", autouse=True)
def _sqlite_database_opened_only_by_sqlite(request):
    """On SQLite, nothing in the test process may open the database's files itself: closing such a
    descriptor drops every lock this process's SQLite connections hold, and a worker process could
    then checkpoint and delete the write-ahead log under them, losing rows and corrupting the file
    (https://sqlite.org/howtocorrupt.html, 2.2). SQLite's own opens raise no audit event."""
    if _unit_only(request):
        return
    request.getfixturevalue("django_db_setup")
    from django.db import connection

    if connection.vendor != "sqlite":
        return
    database = os.path.realpath(connection.settings_dict["NAME"])
    guarded = {database, database + "-wal", database + "-shm", database + "-journal"}

    prefix = os.path.basename(database)

    def refuse(event, args):
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if os.path.basename(path).startswith(prefix) and os.path.realpath(path) in guarded:
                raise PermissionError(f"the test database is SQLite's alone: do not open {args[0]}")

    sys.addaudithook(refuse)  # for the rest of the session: audit hooks cannot be removed


@pytest.fixture(scope="session", autouse=True)
def launcher_service(request, tmp_path_factory):
    """The launcher (launcher/) this run's local jobs go through, as `make run` starts it: as root
    a real root launcher for this process's uid, as a normal user the rootless one. Its roots hold
    every test's storage directories (below pytest's base temporary directory) and the runtimes."""
    if _unit_only(request):
        yield None
        return
    base = tmp_path_factory.getbasetemp()
    venvs = settings.VAR_DIR / "venvs"
    venvs.mkdir(parents=True, exist_ok=True)
    started = LauncherProcess(base / "launcher", {"pfs": base, "jobs": base, "logs": base, "venvs": venvs}).ready()
    settings.LAUNCHER_SOCKET, settings.JOB_UIDS = started.sock, started.job_uids
    yield started
    started.stop()


@pytest.fixture(autouse=True)
def _request_threads_end():
    """A request thread keeps its database connection for its next request (on SQLite), and Django
    checks that connection as a request starts: in a later test not allowed the database, that
    check would trip pytest-django's guard. So after each test the service's idle request threads
    end, each closing its connection (core/request_threads.py)."""
    yield
    asgi = sys.modules.get("paddleweb.asgi")  # not imported: no request was served
    if asgi is not None:
        asgi.request_threads.end_idle()


@pytest.fixture(autouse=True)
def storage_dirs(request):
    """Each test gets empty PFS, job and log directories (ids restart between tests).
    Runtime virtualenvs stay shared: building paddlepaddle's once is enough. (A unit test touches
    no file: it gets none.)"""
    if request.node.get_closest_marker("unit"):
        yield None
        return
    settings, tmp_path = request.getfixturevalue("settings"), request.getfixturevalue("tmp_path")
    launcher_service = request.getfixturevalue("launcher_service")
    settings.PFS_ROOT = tmp_path / "pfs"
    settings.JOBS_ROOT = tmp_path / "jobs"
    settings.LOGS_ROOT = tmp_path / "logs"
    settings.VENVS_ROOT = settings.VAR_DIR / "venvs"
    yield tmp_path
    drop_job_networks(launcher_service, launcher_service.roots["jobs"])


@pytest.fixture
def datacenter(db):
    from accounts.models import Datacenter
    from quotas.models import Quota

    # No restarts unless a test asks for them (max_restarts): a failing test job fails at once. Room for
    # every test's jobs whatever the machine (the queue's own tests set their capacity).
    dc = Datacenter.objects.create(name="local", backend="local", default_max_restarts=0,
                                   capacity_cpu_millicores=1000 * 1000, capacity_memory_bytes=2**40, capacity_gpus=64)
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


@pytest.fixture
def alice_api(alice):
    return token_client(alice)


@pytest.fixture
def bob_api(bob):
    return token_client(bob)


@pytest.fixture
def no_job_left_behind(transactional_db):
    """Local jobs a test leaves running (an assertion failed before its kill) are stopped, their
    network namespaces and cgroups dropped. For modules that start real local jobs."""
    yield
    from jobs.backends.local.backend import LocalBackend
    from jobs.models import Job

    for job in Job.objects.select_related("datacenter"):
        LocalBackend(job.datacenter).delete(job)


@pytest.fixture
def system(transactional_db):
    with running_system():
        yield




@pytest.fixture
def page(live_server, alice, monkeypatch):
    """Debian's Chromium, driven by Playwright, logged in to the live server as alice."""
    with logged_in_browser(live_server.url, monkeypatch) as page:
        yield page


@pytest.fixture
def zero_copy_calls(monkeypatch):
    """The zero-copy loops core.server ran, in order: ("sendfile", offset, count) for a
    response span and ("splice", bytes) for a request body."""
    from core import server

    seen = []
    real_send, real_store = server._send_file, server._store_body

    def send_file(sock, fd, offset, count):
        seen.append(("sendfile", offset, count))
        return real_send(sock, fd, offset, count)

    def store_body(head, sock, fd, offset, remaining, told=None):
        seen.append(("splice", len(head) + remaining))
        return real_store(head, sock, fd, offset, remaining, told)

    monkeypatch.setattr(server, "_send_file", send_file)
    monkeypatch.setattr(server, "_store_body", store_body)
    return seen
