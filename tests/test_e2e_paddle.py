"""End to end with real PaddlePaddle: the examples submitted through /api/v2, run by a real
Celery worker and the watcher, in runtime virtualenvs built from their requirements.txt.

The first run installs paddlepaddle into var/test/venvs (a few minutes); later runs reuse it."""

import shutil
from pathlib import Path

import pytest

from jobs.metrics import parse_metrics
from jobs.models import Job
from pfs.paths import home
from tests.support import job_processes, wait_for, wait_state

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def upload_example(user, example: str, name: str) -> str:
    target = home(user, "local").child("jobs", name)
    shutil.copytree(EXAMPLES / example, target.disk)
    return target.virtual


def losses(job):
    """Loss per trainer, from the metric lines the job page plots."""
    return {name: series["loss"] for name, series in parse_metrics(job)["replicas"].items()}


def finish(job):
    wait_state(job, ["Succeeded", "Failed", "Killed"], timeout=1500)
    wait_for(lambda: not job_processes(job), 30, what="every process of the job to be gone")
    wait_for(lambda: not job.replicas.filter(state__in=["Pending", "Running"]).exists(), 10,
             what="the watcher to record every replica's end")
    return job


def test_fit_a_line_with_2_pservers_and_2_trainers(system, alice, alice_api):
    package = upload_example(alice, "fit_a_line", "fit-a-line")
    res = alice_api.post("/api/v2/jobs/", {
        "name": "fit-a-line", "package": package, "entry": "python train.py",
        "pservers": 2, "trainers": 2, "passes": 10, "cpu": "500m", "pscpu": "500m"}, format="json")
    assert res.status_code == 201, res.json()
    job = finish(Job.objects.get(name="fit-a-line"))

    body = alice_api.get("/api/v2/jobs/fit-a-line/").json()
    assert job.state == "Succeeded", job.message
    states = {r["name"]: r["state"] for r in body["replicas"]}
    assert states == {"pserver-0": "Terminated", "pserver-1": "Terminated",
                      "trainer-0": "Succeeded", "trainer-1": "Succeeded"}
    curves = losses(job)
    assert set(curves) == {"trainer-0", "trainer-1"}
    assert all(len(values) == 10 for values in curves.values()), curves
    # Async training shares the parameters: a trainer that starts late finds them half-trained,
    # so its own first pass may already be low. The model learned if some trainer saw the
    # untrained loss and every trainer ends near the data's noise floor (noise variance 4).
    finals = [values[-1] for values in curves.values()]
    assert max(finals) < 8, f"the loss did not reach the noise floor: {curves}"
    assert max(values[0] for values in curves.values()) > 5 * max(finals), f"the loss did not go down: {curves}"
    model = home(alice, "local").child("models", "fit-a-line").disk
    assert any(model.rglob("*.pdiparams")), f"no model saved in {model}"
    assert job_processes(job) == []


def test_collective_example_with_2_trainers(system, alice, alice_api):
    package = upload_example(alice, "collective", "coll")
    res = alice_api.post("/api/v2/jobs/", {"name": "coll", "package": package, "entry": "python train.py",
                                           "mode": "collective", "trainers": 2, "passes": 10}, format="json")
    assert res.status_code == 201, res.json()
    job = finish(Job.objects.get(name="coll"))
    assert job.state == "Succeeded", job.message
    assert set(losses(job)) == {"trainer-0", "trainer-1"}
    for trainer, values in losses(job).items():
        assert values and values[-1] < values[0] / 5, f"{trainer}: {values}"
    assert (home(alice, "local").child("models", "coll").disk / "model.pdparams").exists()
