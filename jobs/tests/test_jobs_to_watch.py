"""jobs.tasks.jobs_to_watch, which the watcher reads twice a pass and the worker's reconcile once:
the jobs whose replicas may still change, found through indexes, not by reading every job ever
run (at 100,000 jobs that was 50-170 ms of PostgreSQL's time per query, every half second)."""

import pytest
from django.db import connection

from jobs.models import Job, Replica
from jobs.tasks import jobs_to_watch
from tests.support import make_job

pytestmark = pytest.mark.django_db


def test_active_jobs_and_ended_ones_with_an_unsettled_replica_once_each(alice, bob, datacenter):
    for name, state, replicas in [
        ("starting", "Starting", []), ("running", "Running", ["Running", "Running"]),
        ("running-bare", "Running", []),  # every active job is watched, replicas or not
        ("killed-racing", "Killed", ["Terminated", "Running"]), ("suspended-pending", "Suspended", ["Pending"]),
        ("failed-done", "Failed", ["Failed", "Terminated"]), ("succeeded", "Succeeded", []),
        ("queued", "Queued", []), ("building", "Building", []), ("suspended-done", "Suspended", ["Terminated"]),
    ]:
        job = make_job(alice, datacenter, name=name, state=state)
        for index, replica_state in enumerate(replicas):
            Replica.objects.create(job=job, role="trainer", index=index, state=replica_state)
    make_job(bob, datacenter, name="bobs", state="Running")
    watched = list(jobs_to_watch())
    assert sorted(j.name for j in watched) == ["bobs", "killed-racing", "running", "running-bare", "starting",
                                               "suspended-pending"]
    assert [j.name for j in watched] == list(Job.objects.filter(pk__in=[j.pk for j in watched])
                                             .values_list("name", flat=True))  # newest first, as before
    assert {j.datacenter.name for j in watched} == {datacenter.name}  # read with it
    assert sorted(jobs_to_watch().filter(user=bob).values_list("name", flat=True)) == ["bobs"]


def test_on_postgresql_it_reads_indexes_not_every_job_or_replica(alice, datacenter):
    if connection.vendor != "postgresql":
        pytest.skip("query plans are PostgreSQL's")
    Job.objects.bulk_create(Job(user=alice, datacenter=datacenter, name=f"old-{i}", k8s_name=f"old-{i}", mode="ps",
                                pservers=1, trainers=1, package="/p", entry="x", state="Succeeded")
                            for i in range(300))
    for job in Job.objects.all()[:50]:
        Replica.objects.create(job=job, role="trainer", index=0, state="Succeeded")
    make_job(alice, datacenter, name="running")
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")
        cur.execute("ANALYZE jobs_replica")
        cur.execute("SET LOCAL enable_seqscan = off")  # a test-sized table is read whole either way
        plans = [qs.explain() for qs in (jobs_to_watch(), jobs_to_watch().values_list("pk", flat=True))]
    for plan in plans:
        assert "Seq Scan on jobs_job" not in plan and "Seq Scan on jobs_replica" not in plan, plan
        assert " replica_unsettled " in plan, plan
