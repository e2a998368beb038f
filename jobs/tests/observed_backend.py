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


def register(monkeypatch: pytest.MonkeyPatch, name: str, backend: type[ObservedBackend]) -> None:
    """Make `backend` the backend a datacenter names `name` (at most 20 characters, as
    Datacenter.backend), with nothing observed or called yet. The caller clears
    registry.backend_class's cache when done."""
    monkeypatch.setitem(registry.BACKENDS, name, f"{backend.__module__}.{backend.__qualname__}")
    registry.backend_class.cache_clear()
    OBSERVED.clear()
    CALLS.clear()
