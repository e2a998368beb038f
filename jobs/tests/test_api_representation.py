"""The job API's serializers read plain fields straight off the instance (core.api's
PlainFieldsRepresentation): the answer is the same as DRF's own, field for field, for values of
every kind (text, numbers, booleans, choices, JSON, dates, None, related names, nested lists)."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers

from accounts.models import Registry
from core.api import PlainFieldsRepresentation
from jobs.api.serializers import JobDetailSerializer, JobEventSerializer, JobSerializer, ReplicaSerializer
from jobs.models import Job, JobEvent, Replica, ReplicaSample
from tests.support import make_job

pytestmark = pytest.mark.django_db


def drf(serializer_class):
    """The same serializer with DRF's own fields and to_representation."""
    return type(f"DRF{serializer_class.__name__}", (serializer_class,),
                {"to_representation": serializers.ModelSerializer.to_representation,
                 "get_fields": serializers.ModelSerializer.get_fields})


@pytest.fixture
def job(alice, datacenter):
    source = make_job(alice, datacenter, name="source")
    job = make_job(alice, datacenter, name="full", state="Running")
    registry = Registry.objects.create(user=alice, name="reg", server="r.example.com", username="u", password="p")
    Job.objects.filter(pk=job.pk).update(
        cloned_from=source, registry=registry, env={"A": "1", "B": ""}, gpu=1, timeout=3600, priority=3,
        queue_position=None, started=timezone.now(), reason="Running", message="all replicas run",
        fail_fast=False, permanent_exit_codes=[2, 3])
    job.refresh_from_db()
    r0 = Replica.objects.create(job=job, role="trainer", index=0, state="Running", host="h", port=8001, pod="12",
                                started=timezone.now())
    Replica.objects.create(job=job, role="pserver", index=0, state="Failed", exit_code=-9, restarts=2)
    ReplicaSample.objects.create(replica=r0, taken=timezone.now() - timedelta(seconds=1), cpu_percent=None,
                                 memory_bytes=123)
    JobEvent.objects.create(job=job, replica=r0, state="Running", reason="Started", message="")
    JobEvent.objects.create(job=job, state="Running", reason="Running", message="ok")
    return Job.objects.select_related("datacenter", "registry", "cloned_from").get(pk=job.pk)


@pytest.mark.parametrize("serializer", [JobSerializer, JobDetailSerializer])
def test_a_job_reads_the_same_as_with_drf_alone(job, serializer):
    assert serializer(job).data == drf(serializer)(job).data


def test_lists_of_jobs_replicas_and_events_read_the_same_as_with_drf_alone(job, alice, datacenter):
    make_job(alice, datacenter, name="plain", state="Queued")
    jobs = list(Job.objects.select_related("datacenter", "registry", "cloned_from"))
    assert JobSerializer(jobs, many=True).data == drf(JobSerializer)(jobs, many=True).data
    replicas = list(job.replicas.all())
    assert ReplicaSerializer(replicas, many=True).data == drf(ReplicaSerializer)(replicas, many=True).data
    events = list(job.events.select_related("replica"))
    assert JobEventSerializer(events, many=True).data == drf(JobEventSerializer)(events, many=True).data


def test_a_missing_related_object_reads_as_with_drf_alone(job):
    class EventSerializer(PlainFieldsRepresentation, serializers.ModelSerializer):
        role = serializers.CharField(source="replica.role", read_only=True)  # no default: no key at all
        index = serializers.CharField(source="replica.index", read_only=True, default="none")
        host = serializers.CharField(source="replica.host", read_only=True, allow_null=True)

        class Meta:
            model = JobEvent
            fields = ["state", "role", "index", "host"]

    events = list(job.events.select_related("replica"))
    assert {e.replica_id is None for e in events} == {True, False}
    assert EventSerializer(events, many=True).data == drf(EventSerializer)(events, many=True).data


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai", "America/St_Johns"])
def test_dates_read_as_with_drf_alone_in_the_active_time_zone(job, zone):
    with timezone.override(zone):
        assert JobDetailSerializer(job).data == drf(JobDetailSerializer)(job).data
        assert JobDetailSerializer(job).data["created"].endswith("Z") == (zone == "UTC")


@pytest.fixture
def drf_alone(monkeypatch):
    """Switches the job API to what DRF alone answers: the queryset's own SQL compiled per request
    (no prepared page, job or token lookup shortcut) and DRF's own fields and representation for
    every serializer, nested ones included."""
    from rest_framework.viewsets import GenericViewSet

    from core.api import OwnedViewSet
    from jobs.api.views import JobViewSet

    def switch():
        monkeypatch.setattr(JobViewSet, "paginate_queryset", GenericViewSet.paginate_queryset)
        monkeypatch.setattr(JobViewSet, "get_object", OwnedViewSet.get_object)
        monkeypatch.setattr(PlainFieldsRepresentation, "to_representation",
                            serializers.ModelSerializer.to_representation)
        monkeypatch.setattr(PlainFieldsRepresentation, "get_fields", serializers.ModelSerializer.get_fields)

    return switch


def test_the_job_list_and_detail_answer_byte_for_byte_as_drf_alone(job, alice, alice_api, datacenter, drf_alone):
    for i in range(55):  # a full first page and a second one
        clone = make_job(alice, datacenter, name=f"job-{i}", state="Succeeded" if i % 2 else "Queued")
        Job.objects.filter(pk=clone.pk).update(cloned_from=job if i % 3 else None, registry=job.registry)
    urls = ["/api/v2/jobs/", "/api/v2/jobs/full/", "/api/v2/jobs/job-7/", "/api/v2/jobs/?limit=5",
            "/api/v2/jobs/?state=Queued"]
    first = alice_api.get("/api/v2/jobs/").json()
    urls += [first["next"], alice_api.get(first["next"]).json()["previous"]]
    ours = [alice_api.get(url) for url in urls]
    drf_alone()
    theirs = [alice_api.get(url) for url in urls]
    for url, a, b in zip(urls, ours, theirs, strict=True):
        assert a.status_code == b.status_code == 200, url
        assert a.content == b.content, url
    assert len(first["results"]) == 50 and first["next"] and first["previous"] is None


def test_readers_are_made_once_per_class_and_zone_and_keep_to_their_zone(job, monkeypatch):
    from core import api

    made = []
    original = api._plain_reader
    monkeypatch.setattr(api, "_plain_reader", lambda field: made.append(field.field_name) or original(field))
    monkeypatch.setattr(api, "_READERS", {})
    for zone in ["UTC", "Asia/Shanghai", "UTC", "Asia/Shanghai"]:
        with timezone.override(zone):
            assert JobSerializer(job).data == drf(JobSerializer)(job).data
            assert JobSerializer([job, job], many=True).data == drf(JobSerializer)([job, job], many=True).data
    assert len(made) == 2 * len(JobSerializer.Meta.fields)
