"""Suspend and resume, and run again, with real processes: the worker and the watcher run (the
`system` fixture), the replicas are real programs in the local backend's sandbox."""

import pytest
from django.core.exceptions import ValidationError

from jobs import services
from jobs.backends.local.backend import LocalBackend
from jobs.live import logstore
from jobs.models import JobState, ReplicaState
from tests.support import job_processes, make_package, wait_for, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]

# A trainer that keeps its progress in a checkpoint file in its working directory (the working
# copy is kept across attempts; PADDLE_CHECKPOINT_DIR is the ckpt helper's), saves it on SIGTERM
# and continues from it when started again.
CHECKPOINTING = """
import os, signal, sys, time
TOTAL = 30
step = int(open("ckpt.txt").read()) if os.path.exists("ckpt.txt") else 0
print("starting from step", step, flush=True)

def save(*_):
    open("ckpt.txt", "w").write(str(step))
    print("checkpoint saved at step", step, flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, save)
while step < TOTAL:
    step += 1
    print("step", step, flush=True)
    time.sleep(0.2)
print("done at step", step, flush=True)
"""


def log_of(job, name="trainer-0"):
    return logstore.read(job.replicas.get(role=name.split("-")[0], index=int(name.split("-")[1]))).text


def test_suspend_stops_the_replicas_and_resume_continues_from_the_checkpoint(system, alice):
    pkg = make_package(alice, "ckpt", {"train.py": CHECKPOINTING})
    job = services.submit_job(alice, {"name": "ckpt", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 2})
    wait_state(job, JobState.RUNNING, timeout=120)
    wait_for(lambda: "step 3\n" in log_of(job, "trainer-1"), 60, what="trainer-1 to reach step 3")

    services.suspend_job(job)
    wait_for(lambda: all(r.state == ReplicaState.TERMINATED for r in job.replicas.all()), 60,
             what=lambda: f"replicas to stop: {list(job.replicas.values_list('state', flat=True))}")
    job.refresh_from_db()
    assert job.state == JobState.SUSPENDED
    assert {r.reason for r in job.replicas.all()} == {"Suspended"}
    wait_for(lambda: not job_processes(job), 30, what="the job's processes to end")
    saved = {}
    for replica in job.replicas.all():
        work = LocalBackend(job.datacenter).replica_dir(replica) / "work"
        saved[replica.name] = int((work / "ckpt.txt").read_text())
        assert f"checkpoint saved at step {saved[replica.name]}" in log_of(job, replica.name)
    assert all(0 < s < 30 for s in saved.values())

    services.resume_job(job)
    wait_state(job, JobState.SUCCEEDED, timeout=120)
    for name, step in saved.items():
        log = log_of(job, name)  # one log across both attempts
        assert log.index("checkpoint saved") < log.index(f"starting from step {step}\n") < log.index("done at step 30")
    assert {r.attempt for r in job.replicas.all()} == {1}
    assert [e.state for e in job.events.filter(replica=None)][-3:] == ["Starting", "Running", "Succeeded"]


def test_run_again_runs_a_copy_from_the_start(system, alice):
    pkg = make_package(alice, "once", {"train.py": "print('ran', flush=True)\n"})
    job = services.submit_job(alice, {"name": "once", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1})
    wait_state(job, JobState.SUCCEEDED, timeout=120)
    copy = services.clone_job(alice, job, {})
    wait_state(copy, JobState.SUCCEEDED, timeout=120)
    assert copy.name == "once-2" and copy.cloned_from_id == job.pk
    assert log_of(copy) == "ran\n"


SERVING = """
import os, socket, time
if os.environ["TRAINING_ROLE"] == "PSERVER":
    server = socket.create_server((os.environ["POD_IP"], int(os.environ["PADDLE_PORT"])))
print("up", flush=True)
time.sleep(600)
"""


def test_a_suspended_parameter_server_job_frees_everything_and_can_be_killed(system, alice):
    pkg = make_package(alice, "serve", {"train.py": SERVING})
    job = services.submit_job(alice, {"name": "serve", "package": pkg, "entry": "python train.py",
                                      "pservers": 1, "trainers": 1})
    wait_state(job, JobState.RUNNING, timeout=120)
    wait_for(lambda: all("up" in log_of(job, r.name) for r in job.replicas.all()), 60, what="both replicas up")
    services.suspend_job(job)
    wait_for(lambda: not job_processes(job), 60, what="the job's processes to end")
    wait_for(lambda: {(r.state, r.reason) for r in job.replicas.all()} == {(ReplicaState.TERMINATED, "Suspended")},
             30, what=lambda: f"replicas Suspended: {list(job.replicas.values_list('state', 'reason'))}")
    assert services.kill_job(job)
    job.refresh_from_db()
    assert job.state == JobState.KILLED
    with pytest.raises(ValidationError, match="only a suspended job"):
        services.resume_job(job)
