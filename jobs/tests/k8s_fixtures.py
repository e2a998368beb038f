"""Fixtures of the Kubernetes tests: an emulated cluster, a datacenter configured with its
kubeconfig, jobs submitted through the services, and the watcher's Kubernetes part."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.support import wait_for

from .k8s_cluster import Cluster
from .k8s_rbac import Authorizer

FAST = {"pending_timeout": 30, "watch_timeout": 30, "api_timeout": 5, "api_retries": 4,
        "storage": {"kind": "hostPath", "path": "/mnt/pfs"}}


@pytest.fixture
def cluster():
    """The emulated cluster, authorizing every request by deploy/kubernetes/rbac.yaml as written:
    whatever the service asks that RBAC would refuse fails the test where it happens."""
    with Cluster(rbac=Authorizer.from_deploy()) as c:
        yield c
        assert not c.denied, f"refused by deploy/kubernetes/rbac.yaml: {c.denied}"


@pytest.fixture
def k8s_dc(db, cluster):
    from accounts.models import Datacenter
    from quotas.models import Quota

    # No restarts unless a test asks for them (max_restarts): a failing test job fails at once.
    dc = Datacenter.objects.create(name="k8s", backend="kubernetes", kubeconfig=cluster.kubeconfig(),
                                   config=dict(FAST), default_max_restarts=0)
    Quota.objects.create(datacenter=dc, user=None, cpu_millicores=64000, memory_bytes=256 * 2**30, gpus=8,
                         max_running_jobs=200)
    return dc


def submit(user, name: str = "fit", **fields):
    """A job queued through the services (its launch task is not run)."""
    from django.db import transaction

    from jobs.services import submit_job
    from tests.support import make_package

    package = make_package(user, name, {"train.py": "print('hi')\n"}, datacenter="k8s")
    data = {"name": name, "datacenter": "k8s", "package": package, "entry": "python train.py", "pservers": 2,
            "trainers": 2, **fields}
    with transaction.atomic():
        return submit_job(user, data)


def ns_of(job) -> str:
    from jobs.backends.registry import get_backend

    return get_backend(job.datacenter).namespace(job)


def started_long_ago(job, seconds: float = 3600) -> None:
    """As if the job had begun to start its replicas `seconds` ago (its pending timeout counts from then)."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import JobEvent, JobState

    JobEvent.objects.filter(job=job, replica=None, state=JobState.STARTING).update(
        created=timezone.now() - timedelta(seconds=seconds))


def launch(job) -> None:
    """What the launch task does: claim, prepare, launch (run inline)."""
    from jobs.tasks import launch_job

    launch_job.run(job.pk)
    job.refresh_from_db()




class Part:
    """The watcher's Kubernetes part, ticked from the test thread."""

    def __init__(self):
        from jobs.backends import registry
        from jobs.watch import WatchLoop

        pushed: list[int] = []

        class Recording(WatchLoop):
            def push_logs(self, job) -> None:
                pushed.append(job.pk)

        self.part = registry.backend_class("kubernetes").watcher("kubernetes")
        self.pushed = pushed
        self.loop = Recording([self.part])

    def tick(self) -> None:
        self.part.tick(self.loop)

    def watcher(self):
        return next(iter(self.part.watchers.values()))[1]

    def passes_in_thread(self, count: int = 3, *, full: bool = False) -> threading.Event:
        """Run `count` passes of the loop on a thread of their own (each a full pass, if asked);
        the event is set once they have all ended, so a test can tell a loop held up."""
        ended = threading.Event()

        def passes() -> None:
            for _ in range(count):
                if full:
                    self.part.next_full = 0
                self.tick()
            ended.set()

        threading.Thread(target=passes, daemon=True).start()
        return ended

    def until(self, check: Callable[[], object], timeout: float = 30.0, what: str | Callable[[], str] = "condition"):
        return wait_for(check, timeout, what, tick=self.tick)

    def job(self, job):
        job.refresh_from_db()
        return job


@pytest.fixture
def part(k8s_dc):
    from jobs.backends.kubernetes import informer as k8s_informer

    p = Part()
    yield p
    p.part.stop()
    k8s_informer.stop_all()


@pytest.fixture
def watch(part):
    """The watcher's Kubernetes part, ticked from the test; the launch a pass continues runs in
    this process as the worker would run it (Celery's documented eager mode, during the pass)."""
    from paddleweb.celery import app

    tick = part.tick

    def eager_tick():
        app.conf.task_always_eager = True
        try:
            tick()
        finally:
            app.conf.task_always_eager = False

    part.tick = eager_tick
    return part
