"""The job list as a workbench: progress and restarts per job, owners for staff, and killing or
deleting several jobs at once (one's own; staff any)."""

import pytest

from jobs import services
from jobs.live import logstore
from jobs.models import Job, JobState
from tests.support import make_package

pytestmark = pytest.mark.django_db


def submit(user, name, state=JobState.QUEUED, **fields):
    pkg = make_package(user, name, {"train.py": ""})
    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "mode": "collective",
                                     "trainers": 1, "passes": 10, **fields})
    Job.objects.filter(pk=job.pk).update(state=state)
    return Job.objects.get(pk=job.pk)


def test_a_running_job_shows_its_progress_and_restarts(client, alice):
    job = submit(alice, "fit", JobState.RUNNING)
    Job.objects.filter(pk=job.pk).update(restarts=2)
    logstore.append(job.replicas.get(), b"".join(b'PADDLECLOUD_METRIC {"step": %d, "loss": 1}\n' % i
                                                 for i in range(1, 5)))
    client.force_login(alice)
    rows = client.get("/jobs/", headers={"HX-Request": "true"}).content.decode()
    assert '<progress max="10" value="4"></progress> 4/10' in rows
    assert '<td class="wide">2</td>' in rows


def test_ticked_jobs_are_killed_or_deleted_together_and_only_ones_own(client, alice, bob):
    mine = [submit(alice, f"fit-{i}", JobState.RUNNING) for i in range(3)]
    theirs = submit(bob, "bobs", JobState.RUNNING)
    client.force_login(alice)
    res = client.post("/jobs/-/bulk/", {"action": "kill", "job": [mine[0].pk, mine[1].pk, theirs.pk]}, follow=True)
    assert "Killing fit-0, fit-1." in res.content.decode()
    states = dict(Job.objects.values_list("name", "state"))
    assert states == {"fit-0": "Killed", "fit-1": "Killed", "fit-2": "Running", "bobs": "Running"}
    res = client.post("/jobs/-/bulk/", {"action": "delete", "job": [mine[0].pk, mine[2].pk, theirs.pk],
                                        "next": "/jobs/?state=Killed"})
    assert res.status_code == 302 and res["Location"] == "/jobs/?state=Killed"
    assert set(Job.objects.filter(deleting=False).values_list("name", flat=True)) == {"fit-1", "bobs"}
    assert Job.objects.get(name="fit-2").state == "Killed"  # deleting kills first
    res = client.post("/jobs/-/bulk/", {"action": "kill", "job": [theirs.pk]}, follow=True)
    assert "Tick the jobs to kill or delete first." in res.content.decode()


def test_staff_see_everyones_jobs_with_their_owners_and_can_act_on_them(client, alice, bob, staff):
    theirs = submit(bob, "bobs", JobState.RUNNING)
    client.force_login(alice)
    assert "bobs" not in client.get("/jobs/?owner=all").content.decode()  # not staff: still only hers
    client.force_login(staff)
    assert "bobs" not in client.get("/jobs/").content.decode()  # staff's own, unless asked
    page = client.get("/jobs/?owner=all").content.decode()
    assert "<th>Owner</th>" in page and "<td>bob</td>" in page and f"/admin/jobs/job/{theirs.pk}/change/" in page
    client.post("/jobs/-/bulk/", {"action": "kill", "job": [theirs.pk]})
    theirs.refresh_from_db()
    assert theirs.state == "Killed" and theirs.message == "killed by staff (staff)"
