"""Finished-job retention: working copies and logs go JOB_RETENTION_DAYS after the job finished;
the job, its replicas and events stay, and the page and the API say why the logs are gone."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.backends.local.backend import LocalBackend
from jobs.lifecycle import retention
from jobs.live import logstore
from jobs.models import Job, JobState, ReplicaState
from jobs.tasks import purge_finished_jobs
from tests.support import deep_chain, make_package

pytestmark = pytest.mark.django_db


@pytest.fixture
def pkg(alice):
    return make_package(alice, "fit", {"train.py": "print('hi')\n"})


def ended(user, pkg, name, days_ago, state=JobState.SUCCEEDED):
    """A job that ended `days_ago` days ago, with a working copy and a log on disk."""
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "pservers": 1})
    Job.objects.filter(pk=job.pk).update(state=state, finished=timezone.now() - timedelta(days=days_ago))
    job.replicas.update(state=ReplicaState.SUCCEEDED, exit_code=0)
    job.refresh_from_db()
    work = LocalBackend(job.datacenter).replica_dir(job.replicas.first()) / "work"
    work.mkdir(parents=True)
    (work / "model.bin").write_bytes(b"x")
    for replica in job.replicas.all():
        logstore.append(replica, b"pass 1 loss 0.5\n")
    return job


def test_expired_jobs_lose_their_files_and_logs_but_keep_their_history(settings, alice, pkg):
    settings.JOB_RETENTION_DAYS = 7
    old = ended(alice, pkg, "old", days_ago=8, state=JobState.FAILED)
    recent = ended(alice, pkg, "recent", days_ago=6)
    events = old.events.count()
    assert purge_finished_jobs() == 1
    old.refresh_from_db()
    assert old.purged is not None and old.state == JobState.FAILED
    assert old.replicas.count() == 2 and old.events.count() == events
    assert not LocalBackend(old.datacenter).job_dir(old).exists()
    assert not logstore.job_dir(old.pk).exists()
    # The recent one keeps everything; a second pass changes nothing (each job is marked once).
    assert LocalBackend(recent.datacenter).job_dir(recent).exists() and logstore.job_dir(recent.pk).exists()
    assert purge_finished_jobs() == 0
    assert Job.objects.get(pk=recent.pk).purged is None


def test_retention_off_keeps_everything(settings, alice, pkg):
    settings.JOB_RETENTION_DAYS = 0
    job = ended(alice, pkg, "old", days_ago=1000)
    assert purge_finished_jobs() == 0
    assert logstore.job_dir(job.pk).exists() and Job.objects.get(pk=job.pk).purged is None


def test_active_and_unsettled_jobs_are_never_purged(settings, alice, pkg):
    settings.JOB_RETENTION_DAYS = 1
    suspended = ended(alice, pkg, "suspended", days_ago=30, state=JobState.SUSPENDED)
    killed = ended(alice, pkg, "killed", days_ago=30, state=JobState.KILLED)
    killed.replicas.filter(role="trainer").update(state=ReplicaState.RUNNING)  # still being stopped
    assert retention.expired() == []
    assert not retention.purge(suspended.pk)  # purge itself refuses a job that has not ended
    assert Job.objects.get(pk=suspended.pk).purged is None


def test_a_failed_removal_is_retried_on_the_next_pass(settings, alice, pkg, monkeypatch):
    settings.JOB_RETENTION_DAYS = 1
    job = ended(alice, pkg, "old", days_ago=2)

    def broken(job_id):
        raise OSError("disk went away")

    monkeypatch.setattr(logstore, "delete_job", broken)
    assert purge_finished_jobs() == 0
    assert Job.objects.get(pk=job.pk).purged is None
    monkeypatch.undo()
    assert purge_finished_jobs() == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("isolation", ["sandbox", "none"])
def test_a_working_copy_holding_a_very_deep_tree_is_removed(settings, alice, pkg, isolation):
    """A job can nest directories deeper than shutil.rmtree can go (it recurses per level, and
    raises even with ignore_errors): its working copy must still go, and the job be purged."""
    settings.JOB_RETENTION_DAYS = 1
    job = ended(alice, pkg, "old", days_ago=2)
    job.datacenter.config = {"isolation": isolation}
    job.datacenter.save(update_fields=["config"])
    work = LocalBackend(job.datacenter).replica_dir(job.replicas.first()) / "work"
    with deep_chain(work / "deep"):
        assert purge_finished_jobs() == 1
        assert not LocalBackend(job.datacenter).job_dir(job).exists()
        assert not logstore.job_dir(job.pk).exists()


class Killed(BaseException):
    """The pass's process dying (kill -9) in the middle: no handler of the code under test runs."""


def test_a_pass_killed_half_way_leaves_the_job_for_the_next_pass(settings, alice, pkg, monkeypatch):
    settings.JOB_RETENTION_DAYS = 1
    job = ended(alice, pkg, "old", days_ago=2)

    def killed(job_id):
        raise Killed

    monkeypatch.setattr(logstore, "delete_job", killed)
    with pytest.raises(Killed):
        retention.purge(job.pk)
    assert Job.objects.get(pk=job.pk).purged is None  # not marked: its logs are still there
    monkeypatch.undo()
    assert purge_finished_jobs() == 1
    assert not logstore.job_dir(job.pk).exists() and Job.objects.get(pk=job.pk).purged is not None


def test_page_and_api_say_the_logs_were_removed(settings, client, alice, alice_api, pkg):
    settings.JOB_RETENTION_DAYS = 3
    job = ended(alice, pkg, "old", days_ago=4)
    retention.purge(job.pk)
    client.force_login(alice)
    page = client.get("/jobs/old/").content.decode()
    assert "removed on" in page and "by the retention policy (kept 3 days" in page
    assert 'id="log"' not in page
    logs = alice_api.get("/api/v2/jobs/old/logs/").json()
    assert logs[0]["text"] == "" and "retention policy" in logs[0]["notice"]
    assert alice_api.get("/api/v2/jobs/old/").json()["purged"] is not None


def test_the_beat_schedule_runs_the_retention_pass():
    from django.conf import settings

    assert settings.CELERY_BEAT_SCHEDULE["job-retention"]["task"] == "jobs.tasks.purge_finished_jobs"
