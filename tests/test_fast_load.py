"""Models loaded past Model.__init__ (core/fast_load.py) are the instances Django would build:
the same attributes, deferred columns, state and related objects; and Django's way is kept where
it would do more (a pre_init or post_init receiver)."""

import pytest
from django.db.models import Model
from django.db.models.signals import post_init

from accounts.models import Datacenter, Registry
from core import fast_load
from jobs.models import Job, JobEvent, Replica
from tests.support import make_job

pytestmark = pytest.mark.django_db


def state(obj: Model) -> dict:
    """What an instance holds: its attributes, its state, its cached related objects' states."""
    attrs = {k: v for k, v in vars(obj).items() if k != "_state"}
    cached = {k: state(v) if isinstance(v, Model) else v for k, v in obj._state.fields_cache.items()}
    return {"attrs": attrs, "adding": obj._state.adding, "db": obj._state.db, "cached": cached,
            "deferred": obj.get_deferred_fields(), "class": type(obj)}


def loaded(monkeypatch, querysets):
    """Each queryset's instances, loaded fast and then as Django loads them."""
    fast = [[state(o) for o in qs()] for qs in querysets]
    with monkeypatch.context() as m:
        m.setattr(fast_load, "_plain", lambda cls: False)
        django = [[state(o) for o in qs()] for qs in querysets]
    return fast, django


def test_loaded_instances_are_those_django_builds(alice, datacenter, monkeypatch):
    source = make_job(alice, datacenter, name="source")
    job = make_job(alice, datacenter, name="full")
    registry = Registry.objects.create(user=alice, name="reg", server="r.example.com", username="u", password="p")
    Job.objects.filter(pk=job.pk).update(cloned_from=source, registry=registry, env={"A": "1"})
    replica = Replica.objects.create(job=job, role="trainer", index=0, state="Running")
    JobEvent.objects.create(job=job, replica=replica, state="Running", reason="Started", message="")
    fast, django = loaded(monkeypatch, [
        lambda: Job.objects.all(),
        lambda: Job.objects.select_related("datacenter", "registry", "cloned_from").defer(
            "datacenter__backend", "registry__password", "cloned_from__entry"),
        lambda: Job.objects.only("name", "state"),
        lambda: JobEvent.objects.select_related("replica", "job"),
        lambda: Registry.objects.all(),
        lambda: Datacenter.objects.all(),
    ])
    assert fast == django
    full = next(j for j in fast[1] if j["attrs"]["name"] == "full")
    assert full["cached"]["registry"]["deferred"] == {"password"} and full["cached"]["cloned_from"]["attrs"]["name"]


def test_no_model_init_runs_for_a_loaded_job(alice, datacenter, monkeypatch):
    make_job(alice, datacenter)
    made = []
    original = Model.__init__
    monkeypatch.setattr(Model, "__init__", lambda self, *a, **k: made.append(type(self)) or original(self, *a, **k))
    job = Job.objects.select_related("datacenter").get()
    assert made == [] and job.datacenter.name == "local" and job.user_id == alice.pk
    assert job.user == alice  # a related object not loaded is fetched as usual
    job.state = "Failed"
    job.save(update_fields=["state"])
    assert Job.objects.get().state == "Failed"


def test_a_model_with_a_post_init_receiver_is_loaded_by_django(alice, datacenter):
    make_job(alice, datacenter)
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.name)

    post_init.connect(receiver, sender=Job)
    try:
        Job.objects.get()
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == ["fit"]
