"""A deleted job's checkpoints stay (a job submitted again under its name resumes from them): the
new job says it found them, the delete dialog says they stay and deletes them only when asked."""

import pytest

from jobs import checkpoints, services
from jobs.models import Job
from pfs import services as pfs
from tests.support import make_package

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def tasks_in_process():
    """Celery runs the delete task in this process as it is queued (its documented eager mode)."""
    from paddleweb.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def submit(user, name="fit"):
    pkg = make_package(user, f"pkg-{name}", {"train.py": ""})
    return services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1})


def save_checkpoint(job):
    pfs.mkdir(job.user, f"{checkpoints.where(job)}/pass-80")
    pfs.write_file(job.user, f"{checkpoints.where(job)}/pass-80/meta.json", [b"{}"], length=2)


def test_a_new_job_onto_an_earlier_jobs_checkpoints_says_it_found_them(alice, client):
    first = submit(alice)
    assert not first.events.filter(reason=checkpoints.FOUND).exists()
    save_checkpoint(first)
    services.delete_job(first)  # the task runs on commit: checkpoints kept
    assert not Job.objects.filter(name="fit").exists()
    assert pfs.listdir(alice, checkpoints.where(first))
    again = submit(alice)
    [event] = again.events.filter(reason=checkpoints.FOUND)
    assert "/pfs/local/home/alice/jobs/fit/checkpoints holds checkpoints of an earlier job named fit" in event.message
    client.force_login(alice)
    assert "Started on existing checkpoints: /pfs/local/home/alice/jobs/fit/checkpoints" in (
        client.get("/jobs/fit/").content.decode())


def test_deleting_with_checkpoints_removes_them_and_frees_their_storage(alice, client):
    job = submit(alice)
    save_checkpoint(job)
    client.force_login(alice)
    page = client.get("/jobs/fit/").content.decode()
    assert "Its checkpoints in <code>/pfs/local/home/alice/jobs/fit/checkpoints</code> stay" in page
    assert 'name="checkpoints" value="1"' in page
    res = client.post("/jobs/fit/delete/", {"checkpoints": "1"}, follow=True)
    assert "deleted with its history, logs and checkpoints" in res.content.decode()
    assert not checkpoints.found(job) and not Job.objects.filter(name="fit").exists()


def test_the_api_keeps_checkpoints_unless_asked(alice, alice_api):
    for name, query, kept in [("keep", "", True), ("drop", "?checkpoints=true", False)]:
        job = submit(alice, name)
        save_checkpoint(job)
        assert alice_api.delete(f"/api/v2/jobs/{name}/{query}").status_code == 204
        assert checkpoints.found(job) is kept


def test_a_job_without_checkpoints_offers_nothing_to_delete(alice, client):
    submit(alice)
    client.force_login(alice)
    assert 'name="checkpoints"' not in client.get("/jobs/fit/").content.decode()
