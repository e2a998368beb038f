"""The backend registry: every datacenter kind the service offers has a backend with a watcher,
and the watch loop runs them all."""

import threading

import pytest

from accounts.models import Datacenter
from jobs.backends import registry
from jobs.backends.base import Backend, LaunchError, Watcher
from jobs.watch import WatchLoop


def test_every_datacenter_kind_has_a_registered_backend_and_nothing_else_is_registered():
    assert set(registry.BACKENDS) == set(Datacenter.Backend.values)
    for name in registry.BACKENDS:
        cls = registry.backend_class(name)
        assert issubclass(cls, Backend)
        watcher = cls.watcher(name)
        assert isinstance(watcher, Watcher) and watcher.backend == name


def test_an_unknown_backend_is_a_clear_launch_error():
    dc = Datacenter(name="mars", backend="slurm")
    with pytest.raises(LaunchError) as e:
        registry.get_backend(dc)
    assert e.value.reason == "NoBackend" and "slurm" in e.value.message


def test_a_datacenters_config_is_checked_by_its_backend():
    with pytest.raises(ValueError, match="unknown key"):
        registry.backend_class("local").check_config("here", {"nonsense": 1})
    with pytest.raises(ValueError):
        registry.backend_class("kubernetes").check_config("k8s", {"pending_timeout": "soon"})


class CountingWatcher(Watcher):
    def __init__(self, backend, ticked):
        super().__init__(backend)
        self.ticked, self.events = ticked, []

    def start(self):
        self.events.append("start")

    def tick(self, ctx):
        self.events.append("tick")
        list(ctx.jobs_to_watch())  # the context reaches the lifecycle's queries
        self.ticked.set()

    def stop(self):
        self.events.append("stop")


@pytest.mark.django_db(transaction=True)
def test_the_watch_loop_starts_ticks_and_stops_each_watcher():
    ticked = [threading.Event(), threading.Event()]
    watchers = [CountingWatcher("a", ticked[0]), CountingWatcher("b", ticked[1])]
    stopping = threading.Event()
    thread = threading.Thread(target=WatchLoop(watchers).run, args=(stopping, 0.01))
    thread.start()
    try:
        assert all(t.wait(10) for t in ticked)
    finally:
        stopping.set()
        thread.join(10)
    for w in watchers:
        assert w.events[0] == "start" and "tick" in w.events and w.events[-1] == "stop"
