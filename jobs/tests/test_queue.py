"""The queue's order and its answers: priority, fair share between users, first in first out within
a user, backfill and the reservation that stops a big job from starving, positions and reasons in
words, and what is refused at submission because it could never start."""

from datetime import timedelta

import psutil
import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from accounts.models import Datacenter
from jobs import services
from jobs.backends.registry import capacity
from jobs.lifecycle.queue import admit
from jobs.models import Job
from quotas.models import Quota
from quotas.services import Capacity
from tests.support import make_package

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_dc(datacenter):
    """Room for 4 CPU and plenty of memory; generous quotas, so only capacity binds."""
    Datacenter.objects.filter(pk=datacenter.pk).update(capacity_cpu_millicores=4000)
    Quota.objects.filter(datacenter=datacenter, user=None).update(cpu_millicores=64000, max_running_jobs=100)
    datacenter.refresh_from_db()
    return datacenter


def submit(user, name, cpu="1", **fields):
    pkg = make_package(user, name, {"train.py": ""})
    return services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1, "cpu": cpu, **fields})


def states(*jobs):
    for job in jobs:
        job.refresh_from_db()
    return [job.state for job in jobs]


def finish(job):
    Job.objects.filter(pk=job.pk).update(state="Succeeded", finished=timezone.now())


def test_a_job_over_the_running_jobs_quota_waits_queued_with_its_position_and_the_reason(alice, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, max_running_jobs=2)
    jobs = [submit(alice, f"job-{i}") for i in range(4)]

    result = admit(datacenter)

    assert states(*jobs) == ["Building", "Building", "Queued", "Queued"]
    assert result.admitted == [jobs[0].pk, jobs[1].pk]
    assert [(j.queue_position, j.reason, j.message) for j in jobs[2:]] == [
        (1, "QuotaFull", "2 of 2 running jobs used (quota)"), (2, "QuotaFull", "2 of 2 running jobs used (quota)")]
    assert jobs[0].queue_position is None
    assert admit(datacenter).admitted == []  # a second pass finds nothing more to do
    finish(jobs[0])
    assert admit(datacenter).admitted == [jobs[2].pk]
    assert states(jobs[3]) == ["Queued"] and jobs[3].queue_position == 1


def test_a_job_over_the_free_capacity_says_how_much_is_free(alice, small_dc):
    first, second = submit(alice, "first", cpu="3"), submit(alice, "second", cpu="2")
    admit(small_dc)
    assert states(first, second) == ["Building", "Queued"]
    assert (second.reason, second.message) == ("NoCapacity", "needs 2 CPU, 1 free in datacenter local")


def test_higher_priority_goes_first(alice, small_dc):
    Quota.objects.filter(datacenter=small_dc, user=None).update(max_priority=50)
    running = submit(alice, "running", cpu="4")
    admit(small_dc)
    low, high = submit(alice, "low", cpu="4"), submit(alice, "high", cpu="4", priority=50)
    admit(small_dc)
    assert [Job.objects.get(pk=j.pk).queue_position for j in (high, low)] == [1, 2]
    finish(running)
    admit(small_dc)
    assert states(high, low) == ["Building", "Queued"]


def test_the_user_with_the_smaller_dominant_share_goes_next(alice, bob, small_dc):
    a1 = submit(alice, "a1", cpu="3")
    admit(small_dc)
    a2 = submit(alice, "a2", cpu="2")  # queued before bob's, but alice already holds 3 of 4 CPU
    b1 = submit(bob, "b1", cpu="2")
    admit(small_dc)
    assert [Job.objects.get(pk=j.pk).queue_position for j in (b1, a2)] == [1, 2]
    finish(a1)
    b0 = submit(bob, "b0", cpu="1")  # now bob holds 1 CPU and alice none: alice's job goes next
    Job.objects.filter(pk=b0.pk).update(state="Running")
    admit(small_dc)
    assert states(a2, b1) == ["Building", "Queued"]


def test_jobs_of_one_user_start_first_in_first_out(alice, small_dc):
    running = submit(alice, "running", cpu="4")
    jobs = [submit(alice, f"next-{i}", cpu="4") for i in range(3)]
    admit(small_dc)
    for expected in jobs:
        finish(running)
        admit(small_dc)
        assert states(expected) == ["Building"]
        running = expected


def test_smaller_jobs_backfill_past_a_big_one_until_it_has_waited_too_long(alice, bob, small_dc, settings):
    settings.QUEUE_BACKFILL_SECONDS = 3600
    submit(bob, "holder", cpu="3")
    admit(small_dc)
    big, small = submit(alice, "big", cpu="4"), submit(alice, "small", cpu="1")
    admit(small_dc)
    assert states(big, small) == ["Queued", "Building"]  # the small one fits the 1 CPU left

    settings.QUEUE_BACKFILL_SECONDS = 0  # from now on the big job has waited long enough
    finish(small)
    later = submit(bob, "later", cpu="1")
    admit(small_dc)
    assert states(big, later) == ["Queued", "Queued"]  # 1 CPU is free, yet nothing passes the big job
    assert later.message == "waiting behind job big, which has waited longest and keeps its place"
    Job.objects.filter(name="holder").update(state="Succeeded")
    admit(small_dc)
    assert states(big, later) == ["Building", "Queued"]


def test_a_starving_job_over_its_quota_holds_back_only_its_own_users_jobs(alice, bob, small_dc, settings):
    settings.QUEUE_BACKFILL_SECONDS = 0
    Quota.objects.create(datacenter=small_dc, user=alice, cpu_millicores=2000)
    submit(alice, "holder", cpu="1")
    admit(small_dc)
    big, small, other = submit(alice, "big", cpu="2"), submit(alice, "small", cpu="1"), submit(bob, "other", cpu="1")
    admit(small_dc)
    assert states(big, small, other) == ["Queued", "Queued", "Building"]
    assert big.reason == "QuotaFull" and small.message.startswith("waiting behind job big")


def test_jobs_that_could_never_start_are_refused_at_submission(alice, small_dc):
    with pytest.raises(ValidationError) as exc:
        submit(alice, "huge", cpu="5")
    assert exc.value.message_dict["cpu"] == ["needs 5 CPU, more than datacenter local has (4)"]
    with pytest.raises(ValidationError) as exc:
        submit(alice, "pushy", priority=11)
    assert exc.value.message_dict["priority"] == ["at most 10 (your quota's maximum priority)"]
    assert not Job.objects.exists()


def test_a_fail_fast_job_that_does_not_fit_the_capacity_is_refused_with_the_free_amount(alice, small_dc):
    submit(alice, "holder", cpu="3", fail_fast=True)
    with pytest.raises(ValidationError) as exc:
        submit(alice, "impatient", cpu="2", fail_fast=True)
    assert exc.value.message_dict["cpu"] == ["needs 2 CPU, 1 free in datacenter local; not queued (fail fast)"]
    assert list(Job.objects.values_list("name", "state")) == [("holder", "Building")]


def test_a_local_datacenter_holds_the_machines_cpus_and_memory_unless_the_operator_says_otherwise(datacenter):
    import os

    datacenter.capacity_cpu_millicores = datacenter.capacity_memory_bytes = datacenter.capacity_gpus = None
    assert capacity(datacenter) == Capacity(os.cpu_count() * 1000, psutil.virtual_memory().total, 0)
    datacenter.capacity_gpus = 2
    assert capacity(datacenter).gpus == 2
    cluster = Datacenter(name="k8s", backend="kubernetes")
    assert capacity(cluster) == Capacity(None, None, None)


def test_queued_time_orders_a_resumed_job_after_those_queued_before_it(alice, small_dc):
    running = submit(alice, "running", cpu="4")
    admit(small_dc)
    first, second = submit(alice, "first", cpu="4"), submit(alice, "second", cpu="4")
    Job.objects.filter(pk=first.pk).update(queued_at=timezone.now() + timedelta(seconds=5))  # as if resumed later
    finish(running)
    admit(small_dc)
    assert states(first, second) == ["Queued", "Building"]


def test_a_killed_queued_job_leaves_the_queue_and_those_behind_it_move_up(alice, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, max_running_jobs=1)
    running, killed, behind = (submit(alice, name) for name in ("running", "killed", "behind"))
    admit(datacenter)
    assert [Job.objects.get(pk=j.pk).queue_position for j in (killed, behind)] == [1, 2]
    killed.refresh_from_db()
    services.kill_job(killed)
    admit(datacenter)  # what the kill's transition queues
    assert Job.objects.get(pk=killed.pk).queue_position is None
    assert Job.objects.get(pk=behind.pk).queue_position == 1


def test_a_job_past_max_queued_jobs_is_refused_as_is_resuming_one(alice, datacenter):
    """Every admission pass goes through all of a datacenter's waiting jobs, so how many one user
    may have waiting is a quota (max_queued_jobs); fail-fast jobs never wait, so they do not count."""
    assert Quota().max_queued_jobs == 1000  # as docs/operating/jobs.md says
    Quota.objects.create(datacenter=datacenter, user=alice, max_queued_jobs=2)  # no pass runs here: all wait
    suspended = submit(alice, "a")
    services.suspend_job(suspended)
    waiting = [submit(alice, "b"), submit(alice, "c")]

    with pytest.raises(ValidationError) as e:
        submit(alice, "d")
    assert e.value.message_dict == {"__all__": ["2 of 2 queued jobs used (quota): wait until some start, "
                                                "or kill some"]}
    assert not Job.objects.filter(name="d").exists()
    with pytest.raises(ValidationError) as e:
        services.resume_job(suspended)
    assert "2 of 2 queued jobs used (quota)" in e.value.message_dict["__all__"][0]
    assert states(suspended) == ["Suspended"]
    assert states(submit(alice, "e", fail_fast=True)) == ["Building"]  # admitted at once

    services.kill_job(waiting[0])
    services.resume_job(suspended)
    assert states(suspended) == ["Queued"]
