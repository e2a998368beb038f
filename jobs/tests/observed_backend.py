"""A backend for lifecycle tests: it reports what the test puts in OBSERVED and records in CALLS
the stops and restarts the lifecycle asks of it; launching, suspending and deleting do nothing.
Nothing watches it: the test drives sync_job."""

from __future__ import annotations

import pytest

from jobs.backends import registry
from jobs.backends.base import Backend, ReplicaStatus

OBSERVED: dict[tuple[str, int], ReplicaStatus] = {}
CALLS: list[tuple[str, object]] = []


class ObservedBackend(Backend):
    @classmethod
    def watcher(cls, backend):
        raise NotImplementedError  # not watched: the test drives sync_job

    @classmethod
    def check_config(cls, name, config):
        pass

    def prepare(self, job, heartbeat):
        return True

    def launch(self, job):
        pass

    def stop(self, job, replicas=None):
        CALLS.append(("stop", job.name))

    def restart(self, job, replicas):
        CALLS.append(("restart", [r.name for r in replicas]))

    def suspend(self, job):
        pass

    def delete(self, job):
        pass

    def observe(self, job):
        return dict(OBSERVED)


def register(monkeypatch: pytest.MonkeyPatch, backend: type[ObservedBackend]) -> str:
    """Make `backend` a backend a datacenter can name, with nothing observed or called yet; its
    name. The caller clears registry.backend_class's cache when done."""
    name = backend.__name__.lower()
    monkeypatch.setitem(registry.BACKENDS, name, f"{backend.__module__}.{backend.__qualname__}")
    registry.backend_class.cache_clear()
    OBSERVED.clear()
    CALLS.clear()
    return name
