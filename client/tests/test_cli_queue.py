"""The queue from the client: `paddlectl submit -fail-fast -priority`, the queued job's position
and reason in `paddlectl get jobs` and `paddle status`, and the SDK's fail_fast/priority."""

from __future__ import annotations

import json

import pytest
from tests.support import make_package

from .conftest import run_cli

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_slot(alice, datacenter):
    from quotas.models import Quota

    Quota.objects.create(datacenter=datacenter, user=alice, max_running_jobs=1, max_priority=5)
    return make_package(alice, "pkg", {"train.py": "print('hi')\n"})


def test_get_jobs_shows_a_queued_jobs_position_and_reason(config, alice, datacenter, one_slot):
    from jobs.lifecycle.queue import admit

    assert run_cli("submit", "-jobname", "first", "-mode", "collective", one_slot).code == 0
    res = run_cli("submit", "-jobname", "second", "-mode", "collective", "-priority", "5", one_slot)
    assert res.code == 0, res.err
    admit(datacenter)
    table = run_cli("get", "jobs").out
    assert "QUEUE" in table and "#1: 1 of 1 running jobs used (quota)" in table
    assert json.loads(run_cli("get", "jobs", "second", "-o", "json").out)["priority"] == 5
    from jobs.models import Job

    # The later job asked for a higher priority, so it was admitted first.
    assert dict(Job.objects.values_list("name", "state")) == {"first": "Queued", "second": "Building"}


def test_submit_fail_fast_is_refused_with_the_reason_when_the_job_would_wait(config, alice, one_slot):
    from jobs.models import Job

    assert run_cli("submit", "-jobname", "first", "-mode", "collective", "-fail-fast", one_slot).code == 0
    res = run_cli("submit", "-jobname", "second", "-mode", "collective", "-fail-fast", one_slot)
    assert res.code != 0
    assert "1 of 1 running jobs used (quota); not queued (fail fast)" in res.err
    assert list(Job.objects.values_list("name", "state")) == [("first", "Building")]


def test_the_sdk_submits_fail_fast_and_priority(client, alice, one_slot):
    from paddlectl import APIError, PaddleJob

    created = client.submit(PaddleJob(job_name="first", mode="collective", trainers=1, priority=3, fail_fast=True,
                                      trainer_package_path=one_slot))
    assert (created["state"], created["priority"], created["fail_fast"]) == ("Building", 3, True)
    with pytest.raises(APIError) as exc:
        client.submit(job_name="second", mode="collective", trainers=1, fail_fast=True, package=one_slot)
    assert "running jobs used (quota)" in str(exc.value)
