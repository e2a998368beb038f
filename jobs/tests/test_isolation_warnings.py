"""The watcher says at start what the local sandbox cannot enforce on this machine, never silently.

What the launcher can enforce is its own finding (launcher/tests check it on this machine); here
the watcher is given the launcher's answers at the boundary, the launcher's socket, to show it
logs each of them."""

import json
import logging
import socket
import threading

import pytest

from jobs.backends.local import sandbox
from jobs.watch import WatchLoop


def start_and_stop_watcher() -> None:
    stopping = threading.Event()
    stopping.set()
    WatchLoop().run(stopping, 0.01)


@pytest.fixture
def launcher_says(tmp_path, settings):
    """A socket answering `status` as a launcher would, with what the test gives it."""
    path = tmp_path / "launcher.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    answer = {}

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as f:
                f.readline()
                f.write(json.dumps({"ok": True, "result": answer}).encode() + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    settings.LAUNCHER_SOCKET = path

    def say(why=None, enforced=(), missing=None):
        answer.update(rootless=False, sandbox=why, job_uids=None,
                      cgroups={"version": 2, "enforced": list(enforced), "missing": missing or {}})

    yield say
    server.close()


@pytest.mark.django_db(transaction=True)
def test_the_watcher_logs_at_start_which_limits_cannot_be_enforced(launcher_says, caplog):
    launcher_says(enforced=["cpu"], missing={"memory": "no cgroup filesystem is mounted"})
    with caplog.at_level(logging.WARNING):
        start_and_stop_watcher()
    assert "limits NOT enforced: memory: no cgroup filesystem is mounted" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_watcher_logs_at_start_that_jobs_cannot_be_sandboxed(launcher_says, caplog):
    launcher_says(why="bwrap not found: install bubblewrap")
    with caplog.at_level(logging.WARNING):
        start_and_stop_watcher()
    assert "SandboxUnavailable" in caplog.text and "bwrap" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_watcher_logs_at_start_that_the_launcher_does_not_answer(tmp_path, settings, caplog, monkeypatch):
    monkeypatch.setattr("jobs.backends.local.launcher_client.CONNECT_WAIT", 0.1)
    settings.LAUNCHER_SOCKET = tmp_path / "nobody.sock"
    with caplog.at_level(logging.WARNING):
        start_and_stop_watcher()
    assert "SandboxUnavailable" in caplog.text and "the launcher is not running" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_watcher_says_nothing_where_everything_is_enforced(caplog):
    found = sandbox.status()
    if found.why or found.missing:
        pytest.skip("this machine cannot enforce everything")
    with caplog.at_level(logging.WARNING):
        start_and_stop_watcher()
    assert "cannot be sandboxed" not in caplog.text and "NOT enforced" not in caplog.text
