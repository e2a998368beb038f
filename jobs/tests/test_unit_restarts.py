"""The restart policy's arithmetic (jobs/lifecycle/restarts.py), as tables: how long a restart
waits, how many restarts a replica has had of its own, and which limit applies. What the policy
does with a failed replica (restart it alone, the whole gang, or fail the job) needs the recorded
replicas and is tested against the database and real processes in jobs/tests/test_restarts.py."""

import pytest

from accounts.models import Datacenter
from jobs.lifecycle.restarts import backoff_seconds, max_restarts, own_restarts
from jobs.models import Job, Replica

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("restart, seconds", [(1, 10.0), (2, 20.0), (3, 40.0), (5, 160.0), (6, 300.0), (60, 300.0)],
                         ids=["first", "doubles", "doubles-again", "fifth", "capped", "capped-far-out"])
def test_the_backoff_doubles_from_the_base_up_to_the_cap(settings, restart, seconds):
    settings.RESTART_BACKOFF_SECONDS, settings.RESTART_BACKOFF_MAX_SECONDS = 10.0, 300.0
    assert backoff_seconds(restart) == seconds


@pytest.mark.parametrize("job_restarts, replica_restarts, own", [(0, 0, 0), (0, 2, 2), (2, 2, 0), (2, 5, 3), (3, 1, 0)],
                         ids=["none", "its-own", "gang-restarts-only", "both", "never-negative"])
def test_a_replicas_own_restarts_leave_out_the_gangs(job_restarts, replica_restarts, own):
    assert own_restarts(Job(restarts=job_restarts), Replica(restarts=replica_restarts)) == own


@pytest.mark.parametrize("job_limit, default, limit", [(None, 3, 3), (0, 3, 0), (5, 3, 5)],
                         ids=["the-datacenters-default", "none-allowed", "the-jobs-own"])
def test_the_jobs_limit_else_the_datacenters(job_limit, default, limit):
    job = Job(max_restarts=job_limit, datacenter=Datacenter(name="dc", default_max_restarts=default))
    assert max_restarts(job) == limit
