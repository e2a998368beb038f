"""The queue with real processes, a real worker and the watcher: as each job ends, the next one in
the queue's order (priority, then fair share between users, then first in first out) is admitted
on that end, not by a later periodic pass, and its replicas run. How fast is bench/launch.py's
figure (a queued job running within 500 ms of its blocker's end), measured on the running service."""

import pytest

from accounts.models import Datacenter
from jobs import services
from jobs.models import Job, JobEvent
from tests.support import job_processes, make_package, wait_for, wait_state

pytestmark = pytest.mark.django_db(transaction=True)

# Well under the periodic reconcile (RECONCILE_INTERVAL, 15 s), which would also admit the job, yet
# generous enough for a busy machine: the end itself must trigger the admission.
PROMOTION_SECONDS = 10.0


def submit(user, name, program, **fields):
    pkg = make_package(user, name, {"train.py": program})
    return services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1, "cpu": "1", "memory": "256Mi", **fields})


def admitted_at(job):
    return JobEvent.objects.get(job=job, replica=None, state="Building").created


def test_as_jobs_end_the_next_ones_start_at_once_by_priority_then_fair_share(system, alice, bob,
                                                                                     datacenter):
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu_millicores=2000)
    datacenter.quotas.filter(user=None).update(max_priority=5)
    short = "import time; time.sleep(2)\n"
    hold = submit(alice, "hold", "import time; time.sleep(600)\n")
    first = submit(alice, "first", short)
    wait_state(hold, "Running"), wait_state(first, "Running")
    # The datacenter is full: these three wait, in the order they came.
    alice_next = submit(alice, "alice-next", short)
    bob_next = submit(bob, "bob-next", short)
    urgent = submit(alice, "urgent", short, priority=5)
    wait_for(lambda: list(Job.objects.filter(state="Queued").order_by("queue_position").values_list("name", flat=True))
             == ["urgent", "bob-next", "alice-next"], 10, what="queue positions")
    assert Job.objects.get(name="alice-next").message == "needs 1 CPU, 0 free in datacenter local"

    # Priority first; then bob, who holds nothing, before alice, who holds one CPU with `hold`,
    # although her job was queued first.
    previous = first
    for job in (urgent, bob_next, alice_next):
        wait_state(job, "Running", 60)
        previous.refresh_from_db()
        assert previous.state == "Succeeded"
        delay = (admitted_at(job) - previous.finished).total_seconds()
        assert delay < PROMOTION_SECONDS, f"{job.name} admitted {delay:.2f}s after {previous.name} ended"
        previous = job
    wait_state(alice_next, "Succeeded", 60)
    services.kill_job(hold)
    wait_for(lambda: not job_processes(hold), 30, what="the holding job's processes to go")


def test_a_job_the_watcher_saw_running_before_its_launch_returned_keeps_running(transactional_db, alice,
                                                                                  monkeypatch):
    """A job promoted from the queue is watched at once: the watcher may record it Running before
    the launch task's last step, which must not take that for a kill."""
    from jobs.backends.local.backend import LocalBackend
    from jobs.lifecycle.sync import sync_job
    from jobs.tasks import launch_job

    real_launch = LocalBackend.launch

    def launch_then_watch(self, job, **kwargs):
        real_launch(self, job, **kwargs)
        wait_for(lambda: (sync_job(job), Job.objects.get(pk=job.pk).state == "Running")[1], 30,
                 what="the watcher to see the job running")

    monkeypatch.setattr(LocalBackend, "launch", launch_then_watch)
    job = submit(alice, "watched", "import time; print('up', flush=True); time.sleep(600)\n")
    launch_job(job.pk)
    job.refresh_from_db()
    assert job.state == "Running" and job.heartbeat is None
    sync_job(job)
    assert [r.state for r in job.replicas.all()] == ["Running"]
    services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)
    wait_for(lambda: not job_processes(job), 30, what="the job's processes to go")
