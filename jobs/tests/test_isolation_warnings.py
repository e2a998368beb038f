"""The watcher says at start what the local sandbox cannot enforce on this machine, never silently."""

import logging
import threading

import pytest

from jobs.backends.local import cgroups, sandbox
from jobs.watch import WatchLoop


@pytest.fixture(autouse=True)
def fresh_probes():
    sandbox.probe.cache_clear()
    cgroups.support.cache_clear()
    yield
    sandbox.probe.cache_clear()
    cgroups.support.cache_clear()


def start_and_stop_watcher() -> None:
    stopping = threading.Event()
    stopping.set()
    WatchLoop().run(stopping, 0.01)


@pytest.mark.django_db(transaction=True)
def test_the_watcher_logs_at_start_which_limits_cannot_be_enforced(monkeypatch, caplog):
    monkeypatch.setattr(cgroups, "_mounts", lambda: ({}, None))
    with caplog.at_level(logging.WARNING):
        start_and_stop_watcher()
    assert "no cgroup filesystem is mounted" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_watcher_logs_at_start_that_jobs_cannot_be_sandboxed(monkeypatch, caplog):
    monkeypatch.setenv("PATH", "/nonexistent")
    with caplog.at_level(logging.WARNING):
        start_and_stop_watcher()
    assert "SandboxUnavailable" in caplog.text and "bwrap" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_watcher_says_nothing_where_everything_is_enforced(caplog):
    if sandbox.probe() or cgroups.support().missing:
        pytest.skip("this machine cannot enforce everything")
    sandbox.probe.cache_clear()
    cgroups.support.cache_clear()
    with caplog.at_level(logging.WARNING):
        start_and_stop_watcher()
    assert "cannot be sandboxed" not in caplog.text and "local jobs:" not in caplog.text
