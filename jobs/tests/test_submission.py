"""Submission rules, shared by the API, the form and the legacy protocol: every bad input gets a
field error and nothing is created."""

import pytest
from django.core.exceptions import ValidationError

from jobs import services
from jobs.models import Job, JobEvent, Replica
from quotas.models import Quota
from tests.support import make_package

pytestmark = pytest.mark.django_db


@pytest.fixture
def pkg(alice):
    return make_package(alice, "fit", {"train.py": "print('hi')\n"})


def good(pkg, **fields):
    return {"name": "fit-a-line", "package": pkg, "entry": "python train.py", "pservers": 2, "trainers": 2, **fields}


def errors_for(user, data):
    with pytest.raises(ValidationError) as exc:
        services.submit_job(user, data)
    assert not Job.objects.exists() or Job.objects.count() == 1  # only a pre-existing one
    return exc.value.message_dict


def test_a_valid_submission_queues_the_job_with_its_replicas_and_an_event(alice, pkg):
    job = services.submit_job(alice, good(pkg, cpu="500m", memory="512Mi", env={"A": "1"}))
    assert job.state == "Queued"
    assert sorted(r.name for r in Replica.objects.filter(job=job)) == ["pserver-0", "pserver-1", "trainer-0",
                                                                       "trainer-1"]
    assert JobEvent.objects.get(job=job).reason == "Submitted"
    assert job.package == "/pfs/local/home/alice/jobs/fit"


@pytest.mark.parametrize("field,value,message", [
    ("name", "fit_a_line", "letters, digits, '-' and '.'"),
    ("name", "", "required"),
    ("name", "a" * 41, "at most 40 characters"),
    ("name", "my.job.", "ending with a letter or digit"),
    ("name", "-job", "starting with a letter"),
    ("name", "../x", "letters, digits"),
    ("trainers", 0, "at least 1"),
    ("trainers", "two", "whole number"),
    ("pservers", -1, "at least 0"),
    ("pservers", 0, "at least 1 pserver"),
    ("memory", "lots", "not a memory amount"),
    ("psmemory", "1Xi", "not a memory amount"),
    ("cpu", "0", "more than 0"),
    ("cpu", "fast", "not a CPU amount"),
    ("entry", "", "required"),
    ("entry", "python 'unclosed", "cannot parse"),
    ("package", "/pfs/local/home/alice/jobs/missing", "not a directory"),
    ("package", "/pfs/local/home/bob/jobs/fit", "your own home"),
    ("package", "/pfs/local/home/alice/../bob", "'..' is not allowed"),
    ("package", "relative/path", "must start with /pfs/"),
    ("datacenter", "mars", "no datacenter named 'mars'"),
    ("env", {"PADDLE_TRAINER_ID": "9"}, "cannot be overridden"),
    ("env", {"1BAD": "x"}, "not a valid environment variable name"),
    ("registry", "nope", "no registry named 'nope'"),
    ("image", "bad image!", "not a valid image"),
])
def test_bad_fields_get_a_field_error_and_create_nothing(alice, pkg, field, value, message):
    errors = errors_for(alice, good(pkg, **{field: value}))
    assert field in errors, errors
    assert message in errors[field][0]
    assert not Job.objects.exists()


def test_every_error_is_reported_at_once(alice, pkg):
    errors = errors_for(alice, good(pkg, name="bad_name", trainers=0, memory="lots", package="/pfs/local/home/alice/x"))
    assert set(errors) == {"name", "trainers", "memory", "package"}


def test_a_duplicate_name_is_refused(alice, pkg):
    services.submit_job(alice, good(pkg))
    errors = errors_for(alice, good(pkg))
    assert "already have a job named 'fit-a-line'" in errors["name"][0]
    assert Job.objects.count() == 1


def test_the_same_name_is_fine_for_another_user(alice, bob, pkg):
    services.submit_job(alice, good(pkg))
    bob_pkg = make_package(bob, "fit", {"train.py": ""})
    assert services.submit_job(bob, good(bob_pkg)).user == bob


def test_collective_jobs_have_no_pservers(alice, pkg):
    errors = errors_for(alice, good(pkg, mode="collective", pservers=2))
    assert "collective mode has no pservers" in errors["pservers"][0]


def test_a_job_over_the_cpu_quota_gets_a_field_error(alice, pkg, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, cpu_millicores=2000)
    errors = errors_for(alice, good(pkg, cpu="1", pscpu="500m"))  # 2x1 + 2x0.5 = 3 CPU
    assert errors["cpu"] == ["needs 3 CPU, more than your whole quota of 2"]


def test_a_fail_fast_job_over_what_admitted_jobs_leave_of_the_quota_is_refused(alice, pkg, datacenter):
    Quota.objects.filter(datacenter=datacenter, user=None).update(memory_bytes=5 * 2**30, max_running_jobs=2)
    assert services.submit_job(alice, good(pkg, name="one", fail_fast=True)).state == "Building"  # 4 x 1Gi
    errors = errors_for(alice, good(pkg, name="two", fail_fast=True))
    assert errors["memory"] == ["needs 4.0 GiB memory, 4.0 GiB of 5.0 GiB used (quota); not queued (fail fast)"]
    assert not Job.objects.filter(name="two").exists()
    Job.objects.filter(name="one").update(state="Succeeded")  # ended jobs free their share
    assert services.submit_job(alice, good(pkg, name="two", fail_fast=True)).state == "Building"


def test_a_fail_fast_job_over_the_running_jobs_quota_is_refused(alice, pkg, datacenter):
    Quota.objects.filter(datacenter=datacenter, user=None).update(max_running_jobs=1)
    services.submit_job(alice, good(pkg, name="one", fail_fast=True))
    errors = errors_for(alice, good(pkg, name="two", fail_fast=True))
    assert errors["__all__"] == ["1 of 1 running jobs used (quota); not queued (fail fast)"]


def test_gpus_need_gpu_quota(alice, pkg):
    errors = errors_for(alice, good(pkg, gpu=1))
    assert errors["gpu"] == ["needs 2 GPU, more than your whole quota of 0"]
