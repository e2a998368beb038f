"""core/prepared.py: a prepared queryset answers what the queryset it was built from answers, for
whatever values each use binds, compiling its SQL once; what it cannot answer right it refuses."""

import pytest
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.test.utils import CaptureQueriesContext

from core.prepared import Prepared, with_related
from jobs.live import usage
from jobs.models import Job, JobEvent, Replica
from tests.support import make_job

pytestmark = pytest.mark.django_db


def jobs_named(user_id, name):
    return Job.objects.filter(user_id=user_id, name=name).select_related("datacenter").defer("entry")


def test_each_use_binds_its_values_and_reads_what_the_queryset_reads(alice, bob, datacenter):
    for user in (alice, bob):
        for name in ("a", "b"):
            make_job(user, datacenter, name=name)
    prepared = Prepared(jobs_named, int, str)
    for user in (alice, bob):
        for name in ("a", "b", "none"):
            expected = list(jobs_named(user.pk, name))
            with CaptureQueriesContext(connection) as captured:
                got = list(prepared.fetch(user.pk, name))
                assert [j.datacenter.name for j in got] == [j.datacenter.name for j in expected]  # no query more
            assert len(captured) == 1
            assert [(j.pk, j.user_id, j.name) for j in got] == [(j.pk, j.user_id, j.name) for j in expected]
            assert all(j.get_deferred_fields() == {"entry"} for j in got)


def test_the_sql_is_compiled_once(alice, datacenter, monkeypatch):
    make_job(alice, datacenter, name="a")
    prepared = Prepared(jobs_named, int, str)
    assert len(prepared.fetch(alice.pk, "a")) == 1
    compiled = []
    original = SQLCompiler.as_sql
    monkeypatch.setattr(SQLCompiler, "as_sql", lambda self, *a, **k: compiled.append(1) or original(self, *a, **k))
    assert len(prepared.fetch(alice.pk, "a")) == 1
    assert len(prepared.fetch(alice.pk, "b")) == 0
    assert compiled == []


def test_annotations_come_as_the_queryset_gives_them(alice, datacenter):
    job = make_job(alice, datacenter)
    Replica.objects.create(job=job, role="trainer", index=0, state="Running")
    replicas = Prepared(lambda job_id: usage.with_latest(Replica.objects.all()).filter(job_id=job_id), int)
    got = replicas.fetch(job.pk)
    assert [(r.name, usage.latest(r)) for r in got] == [("trainer-0", None)]


def test_a_value_its_lookup_rewrites_is_refused_when_prepared(alice):
    prepared = Prepared(lambda name: Job.objects.filter(name__icontains=name), str)
    with pytest.raises(ValueError, match="rewritten"):
        prepared.fetch("a")


def test_a_value_of_another_type_is_refused(alice):
    prepared = Prepared(jobs_named, int, str)
    with pytest.raises(TypeError):
        prepared.fetch(str(alice.pk), "a")
    with pytest.raises(TypeError):
        prepared.fetch(alice.pk)


def test_a_prepared_queryset_cannot_be_refined(alice):
    prepared = Prepared(jobs_named, int, str)
    with pytest.raises(TypeError, match="cannot be refined"):
        prepared.fetch(alice.pk, "a").filter(state="Running")


def test_with_related_answers_the_reverse_relation_without_a_query(alice, datacenter):
    job = make_job(alice, datacenter)
    other = make_job(alice, datacenter, name="other")
    replica = Replica.objects.create(job=job, role="trainer", index=0, state="Running")
    JobEvent.objects.create(job=job, replica=replica, state="Running", reason="Started", message="")
    JobEvent.objects.create(job=other, state="Queued", reason="Queued", message="")
    job = Job.objects.get(pk=job.pk)
    with_related(job, replicas=Replica.objects.filter(job=job).all(), events=JobEvent.objects.filter(job=job).all())
    replicas, events = list(job.replicas.all()), list(job.events.all())
    with CaptureQueriesContext(connection) as captured:
        assert [r.pk for r in job.replicas.all()] == [replica.pk]
        assert [e.reason for e in job.events.all()] == ["Started"]
        assert all(r.job is job for r in replicas) and all(e.job is job for e in events)
    assert len(captured) == 0
