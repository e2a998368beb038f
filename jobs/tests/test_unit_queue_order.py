"""The queue's order and what admits a job (jobs/lifecycle/queue.py, quotas/services.py), as
tables: who goes next, and the field errors of a job that does not fit. No database: jobs and
quotas are unsaved model instances. The admission pass itself, with its lock, backfill and
starvation, is tested against the database in jobs/tests/test_queue.py."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs.lifecycle.queue import turn, within_user
from jobs.models import Job
from quotas.models import Quota
from quotas.services import Capacity, Resources, job_resources, never_fits, quota_errors

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GI = 2**30


def job(pk, priority=0, queued=0, created=0, resumed=None) -> Job:
    """Job `pk`, submitted `created` s and queued `queued` s after T0 (queued_at is set when it
    is queued again after a resume; until then its creation counts)."""
    return Job(pk=pk, priority=priority, created=T0 + timedelta(seconds=created),
               queued_at=None if resumed is None else T0 + timedelta(seconds=resumed))


WITHIN_USER = [
    ("first-in-first-out", [job(1, created=0), job(2, created=1)], [1, 2]),
    ("higher-priority-first", [job(1, created=0), job(2, priority=5, created=1)], [2, 1]),
    ("same-time-by-id", [job(2, created=0), job(1, created=0)], [1, 2]),
    # A resumed job queues anew: behind the jobs queued before its resume, whenever it was created.
    ("a-resumed-job-queues-anew", [job(1, created=0, resumed=10), job(2, created=5)], [2, 1]),
]


@pytest.mark.parametrize("jobs, order", [c[1:] for c in WITHIN_USER], ids=[c[0] for c in WITHIN_USER])
def test_a_users_queued_jobs_in_order(jobs, order):
    assert [j.pk for j in sorted(jobs, key=within_user)] == order


# Users by their next job and their share of the datacenter: (user, head job, share).
BETWEEN_USERS = [
    ("priority-before-share", [("alice", job(1, priority=5), 0.9), ("bob", job(2), 0.0)], "alice"),
    ("smaller-share-first", [("alice", job(1, created=0), 0.5), ("bob", job(2, created=9), 0.25)], "bob"),
    ("equal-shares-oldest-first", [("alice", job(2, created=5), 0.5), ("bob", job(1, created=1), 0.5)], "bob"),
    ("equal-everything-by-id", [("alice", job(3), 0.0), ("bob", job(2), 0.0)], "bob"),
]


@pytest.mark.parametrize("users, first", [c[1:] for c in BETWEEN_USERS], ids=[c[0] for c in BETWEEN_USERS])
def test_which_users_job_goes_next(users, first):
    assert min(users, key=lambda u: turn(u[1], u[2]))[0] == first


@pytest.mark.parametrize("cap, held, share", [
    (Capacity(4000, 8 * GI, None), Resources(1000, 1 * GI), 0.25),
    (Capacity(4000, 8 * GI, None), Resources(1000, 6 * GI), 0.75),  # memory dominates
    (Capacity(4000, 8 * GI, 4), Resources(0, 0, 2), 0.5),
    (Capacity(None, None, None), Resources(9000, 9 * GI, 9), 0.0),  # no limits: nothing to be a share of
    (Capacity(4000, 8 * GI, 0), Resources(), 0.0),
], ids=["cpu", "memory-dominates", "gpus", "unlimited", "nothing-held"])
def test_the_dominant_share_is_the_largest_fraction_held(cap, held, share):
    assert cap.dominant_share(held) == pytest.approx(share)


@pytest.mark.parametrize("cap, held, request_, errors", [
    (Capacity(4000, 8 * GI, 0), Resources(3000, 0), Resources(1000, GI), {}),
    (Capacity(4000, 8 * GI, 0), Resources(3500, 0), Resources(1000, GI),
     {"cpu": "needs 1 CPU, 0.5 free in datacenter dc"}),
    (Capacity(4000, 8 * GI, 0), Resources(5000, 0), Resources(1000, GI),
     {"cpu": "needs 1 CPU, 0 free in datacenter dc"}),
    (Capacity(4000, 2 * GI, 1), Resources(0, 2 * GI, 1), Resources(1000, GI, 1),
     {"memory": "needs 1.0 GiB memory, 0 B free in datacenter dc", "gpu": "needs 1 GPU, 0 free in datacenter dc"}),
    (Capacity(None, None, None), Resources(10**9, 10**15, 99), Resources(1000, GI, 1), {}),
], ids=["fits-exactly", "short-of-cpu", "over-held-says-0-free", "short-of-memory-and-gpus", "unlimited"])
def test_what_a_job_needs_of_the_free_capacity(cap, held, request_, errors):
    assert cap.shortfalls(held, request_, "dc") == errors


def quota(**fields) -> Quota:
    return Quota(**{"cpu_millicores": 4000, "memory_bytes": 8 * GI, "gpus": 0, "max_running_jobs": 2,
                    "max_priority": 10, **fields})


@pytest.mark.parametrize("q, used, running, request_, fields", [
    (quota(), Resources(3000, 7 * GI), 1, Resources(1000, GI), set()),
    (quota(), Resources(), 2, Resources(1000, GI), {"__all__"}),
    (quota(), Resources(3500, 0), 0, Resources(1000, GI), {"cpu"}),
    (quota(), Resources(0, 7 * GI + 1), 0, Resources(1000, GI), {"memory"}),
    (quota(gpus=1), Resources(0, 0, 1), 0, Resources(1000, GI, 1), {"gpu"}),
    (quota(max_running_jobs=0), Resources(), 0, Resources(10**6, 10 * GI, 1), {"__all__", "cpu", "memory", "gpu"}),
], ids=["fits-exactly", "running-jobs", "cpu", "memory", "gpu", "all-at-once"])
def test_what_takes_a_user_over_quota_now(q, used, running, request_, fields):
    assert set(quota_errors(q, used, running, request_)) == fields


@pytest.mark.parametrize("q, cap, request_, priority, errors", [
    (quota(), Capacity(8000, 16 * GI, 0), Resources(4000, 8 * GI), 10, {}),
    (quota(), Capacity(8000, 16 * GI, 0), Resources(5000, GI), 0,
     {"cpu": "needs 5 CPU, more than your whole quota of 4"}),
    (quota(cpu_millicores=10**6), Capacity(8000, 16 * GI, 0), Resources(9000, GI), 0,
     {"cpu": "needs 9 CPU, more than datacenter dc has (8)"}),
    # Over both: the quota is what the user can change (ask for more), so it is named.
    (quota(), Capacity(2000, 16 * GI, 0), Resources(5000, GI), 0,
     {"cpu": "needs 5 CPU, more than your whole quota of 4"}),
    (quota(), Capacity(None, None, None), Resources(1000, GI), 11,
     {"priority": "at most 10 (your quota's maximum priority)"}),
    (quota(max_running_jobs=0), Capacity(None, None, None), Resources(1000, GI), 0,
     {"__all__": "your quota allows no running jobs in this datacenter"}),
], ids=["fits-at-the-limits", "over-the-whole-quota", "over-the-whole-datacenter", "over-both", "priority",
        "no-running-jobs-allowed"])
def test_what_could_never_start_is_refused(q, cap, request_, priority, errors):
    assert never_fits(q, cap, request_, priority, "dc") == errors


@pytest.mark.parametrize("fields, total", [
    (dict(mode="ps", trainers=2, pservers=1, cpu="1", memory="1Gi", gpu=1, pscpu="500m", psmemory="512Mi"),
     Resources(2500, 2 * GI + GI // 2, 2)),
    (dict(mode="collective", trainers=3, pservers=2, cpu="250m", memory="1Gi", gpu=0, pscpu="4", psmemory="8Gi"),
     Resources(750, 3 * GI, 0)),  # collective: pservers (had they been given) hold nothing
], ids=["ps", "collective"])
def test_what_a_job_holds_once_admitted(fields, total):
    assert job_resources(**fields) == total
