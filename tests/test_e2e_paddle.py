"""End to end with real PaddlePaddle: the examples submitted through /api/v2, run by a real
Celery worker and the watcher, in runtime virtualenvs built from their requirements.txt.

The first run installs paddlepaddle into var/test/venvs (a few minutes); later runs reuse it."""

import re
import shutil
from pathlib import Path

import pytest

from jobs.live import logstore
from jobs.live.metrics import parse_metrics
from jobs.models import Job
from pfs.paths import home
from tests.support import job_processes, replica_program, wait_for, wait_state

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


def trainer_log(job, name):
    """("pass", step, loss) and ("resume", step) events of a trainer's log, across its attempts."""
    role, index = name.split("-")
    log = logstore.path(job.replicas.get(role=role, index=int(index)))
    text = log.read_text(errors="replace") if log.exists() else ""
    events = []
    for line in text.splitlines():
        if m := re.match(r"trainer \d+ pass (\d+) loss ([\d.]+)$", line):
            events.append(("pass", int(m[1]), float(m[2])))
        elif m := re.match(r"trainer \d+ resumes after pass (\d+)", line):
            events.append(("resume", int(m[1])))
    return events


def learned_and_checkpointed(job, checkpoints) -> bool:
    """Both trainers' loss has dropped far below an untrained model's and a checkpoint of such a
    pass exists: a restart from scratch would then show as a loss jump, whatever the timing."""
    passes = {name: [e for e in trainer_log(job, name) if e[0] == "pass"] for name in ("trainer-0", "trainer-1")}
    if not all(passes.values()):
        return False
    untrained = max(p[0][2] for p in passes.values())
    learned = [e[1] for e in passes["trainer-0"] if e[2] < untrained / 8]
    saved = [int(p.name.split("-")[1]) for p in checkpoints.glob("pass-*") if p.name.split("-")[1].isdigit()]
    return bool(learned and saved and max(saved) >= learned[0])


@pytest.mark.parametrize("victim", ["trainer-1", "trainer-0"])
def test_fit_a_line_trainer_killed_mid_run_restarts_and_continues_from_its_checkpoint(system, alice, alice_api,
                                                                                      settings, victim):
    """A kill -9 is a failure that the job's max_restarts lets the trainer survive. Trainer 0 is
    the one that checkpoints, and the one that sets the pservers' parameters at start."""
    settings.RESTART_BACKOFF_SECONDS = 1
    package = upload_example(alice, "fit_a_line", "ckpt")
    res = alice_api.post("/api/v2/jobs/", {
        "name": "ckpt", "package": package, "entry": "python train.py", "pservers": 2, "trainers": 2,
        "passes": 60, "cpu": "500m", "pscpu": "500m", "max_restarts": 2, "restart_mode": "replica"}, format="json")
    assert res.status_code == 201, res.json()
    job = Job.objects.get(name="ckpt")
    checkpoints = home(alice, "local").child("jobs", "ckpt", "checkpoints").disk

    def trained_and_checkpointed():
        return learned_and_checkpointed(job, checkpoints) and replica_program(job, victim, "train.py")

    program = wait_for(trained_and_checkpointed, 1200, what=f"{victim} learned something and a checkpoint of it")
    program.kill()  # SIGKILL, as the OOM killer or a lost machine would
    job = finish(job)

    assert job.state == "Succeeded", job.message
    body = alice_api.get("/api/v2/jobs/ckpt/").json()
    replicas = {r["name"]: r for r in body["replicas"]}
    assert replicas[victim]["restarts"] == 1 and replicas[victim]["state"] == "Succeeded", replicas[victim]
    assert sum(r["restarts"] for r in replicas.values()) == 1, replicas
    events = trainer_log(job, victim)
    resumed = [i for i, e in enumerate(events) if e[0] == "resume"]
    assert len(resumed) == 1, events
    before = [e for e in events[:resumed[0]] if e[0] == "pass"]
    after = [e for e in events[resumed[0]:] if e[0] == "pass"]
    # It resumed after the last pass it recorded (the last it printed, or the one before when
    # the kill came between the two), ran the rest once, and its loss went on from there.
    assert events[resumed[0]][1] in (before[-1][1], before[-1][1] - 1), events
    assert [e[1] for e in after] == list(range(events[resumed[0]][1] + 1, 61)), events
    first_loss = max(before[0][2], next(e[2] for e in trainer_log(job, "trainer-0") if e[0] == "pass"))
    assert after[0][2] < 2 * before[-1][2] + 1, f"the loss started over: {before} then {after}"
    assert after[0][2] < first_loss / 4, f"the loss started over: {before} then {after}"
    assert after[-1][2] < 8, after
    assert (checkpoints / f"{victim}.progress").read_text() == "60\n"
    assert sorted(p.name for p in checkpoints.glob("pass-*")) == ["pass-000059", "pass-000060"]


def test_fit_a_line_pserver_killed_mid_run_restarts_the_job_from_the_last_checkpoint(system, alice, alice_api,
                                                                                      settings):
    """A pserver's failure restarts every replica, so the parameters the pservers held are gone
    and trainer 0 sets those of its last checkpoint."""
    settings.RESTART_BACKOFF_SECONDS = 1
    package = upload_example(alice, "fit_a_line", "gang")
    res = alice_api.post("/api/v2/jobs/", {
        "name": "gang", "package": package, "entry": "python train.py", "pservers": 2, "trainers": 2,
        "passes": 60, "cpu": "500m", "pscpu": "500m", "max_restarts": 2}, format="json")
    assert res.status_code == 201, res.json()
    job = Job.objects.get(name="gang")
    checkpoints = home(alice, "local").child("jobs", "gang", "checkpoints").disk

    def checkpointed():
        return learned_and_checkpointed(job, checkpoints) and replica_program(job, "pserver-0", "train.py")

    wait_for(checkpointed, 1200, what="a checkpoint of a trained model").kill()
    job = finish(job)

    assert job.state == "Succeeded", job.message
    assert job.restarts == 1
    log0 = logstore.path(job.replicas.get(role="trainer", index=0)).read_text()
    found = re.findall(r"trainer 0 set the parameters of checkpoint pass (\d+)", log0)
    assert len(found) == 1, log0[-3000:]
    untrained = max(next(e[2] for e in trainer_log(job, name) if e[0] == "pass") for name in ("trainer-0", "trainer-1"))
    for name in ("trainer-0", "trainer-1"):
        events = trainer_log(job, name)
        resumed = [i for i, e in enumerate(events) if e[0] == "resume"]
        assert len(resumed) == 1, events
        before = [e for e in events[:resumed[0]] if e[0] == "pass"]
        after = [e for e in events[resumed[0]:] if e[0] == "pass"]
        assert [e[1] for e in after] == list(range(events[resumed[0]][1] + 1, 61)), events
        # From the checkpoint: the loss goes on near where it was, far from an untrained model's.
        assert after[0][2] < 2 * before[-1][2] + 1 and after[0][2] < untrained / 4, events
        assert after[-1][2] < 8, events


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
