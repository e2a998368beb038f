"""`paddlectl submit -from`, `suspend`, `resume` and the SDK's clone/suspend/resume against a live
server over real HTTP (real processes: jobs/tests/test_suspend_resume_processes.py)."""

from __future__ import annotations

import json

import pytest
from tests.support import make_package

from .conftest import run_cli
from .test_cli_jobs import make_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pkg(alice):
    return make_package(alice, "pkg", {"train.py": "print('hi')\n"})


def test_submit_from_changes_only_the_flags_given(config, alice, pkg):
    from jobs.models import Job

    make_job(alice, "fit", pkg, env={"LR": "0.1"}, passes=3, cpu="500m")
    res = run_cli("submit", "-from", "fit", "-parallelism", "3", "-env", "SEED=7")
    assert res.code == 0, res.err
    assert "job fit-2 submitted (Queued) (a copy of fit)" in res.out
    copy = Job.objects.get(name="fit-2")
    assert (copy.trainers, copy.passes, copy.cpu, copy.mode, copy.env) == (
        3, 3, "500m", "collective", {"LR": "0.1", "SEED": "7"})
    assert copy.cloned_from.name == "fit"
    res = run_cli("submit", "-from", "fit", "-jobname", "named", "-o", "json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["cloned_from"] == "fit"


def test_submit_from_reports_field_errors_and_missing_jobs(config, alice, pkg):
    make_job(alice, "fit", pkg)
    res = run_cli("submit", "-from", "fit", "-memory", "lots")
    assert res.code == 1 and "memory" in res.err and "Traceback" not in res.err
    res = run_cli("submit", "-from", "ghost")
    assert res.code == 1 and "job 'ghost' not found" in res.err
    res = run_cli("submit", "-from", "fit", "./local-dir")
    assert res.code == 2 and "/pfs/" in res.err
    assert run_cli("submit").code == 2  # neither a package nor -from


def test_plain_submit_keeps_its_defaults(config, alice, pkg):
    from jobs.models import Job

    res = run_cli("submit", "-jobname", "plain", pkg)
    assert res.code == 0, res.err
    job = Job.objects.get(name="plain")
    assert (job.trainers, job.pservers, job.cpu, job.memory, job.passes, job.mode) == (1, 1, "1", "1Gi", 1, "ps")


def test_suspend_and_resume_commands(config, alice, pkg):
    from jobs.models import Job

    make_job(alice, "fit", pkg)
    res = run_cli("suspend", "fit")
    assert res.code == 0 and "job fit suspended" in res.out
    assert Job.objects.get(name="fit").state == "Suspended"
    assert "Suspended" in run_cli("get", "jobs").out  # a suspended job is still listed as not ended
    again = run_cli("suspend", "fit")
    assert again.code == 1 and "it is Suspended" in again.err
    res = run_cli("resume", "fit")
    assert res.code == 0 and "job fit resumed (Queued)" in res.out
    assert run_cli("resume", "ghost").code == 1


def test_sdk_clone_suspend_resume(client, alice, pkg):
    make_job(alice, "fit", pkg)
    assert client.clone("fit", trainers=4)["trainers"] == 4
    assert client.clone("fit", name="fit-named")["cloned_from"] == "fit"
    assert client.suspend("fit")["state"] == "Suspended"
    assert client.resume("fit")["state"] == "Queued"
    assert [j["name"] for j in client.list(all=False)] == ["fit-named", "fit-2", "fit"]
