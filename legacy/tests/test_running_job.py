"""A job submitted by the old client really runs (Celery worker, watcher, sandboxed local
replicas), and what the client then reads back about it is what happened."""

from jobs.models import REPLICA_DONE, Job, JobState
from tests.support import wait_for, wait_state

from . import recorded as rec

A = "/pfs/local/home/alice"
TRAIN = b"""import os, time
if os.environ["TRAINING_ROLE"] == "PSERVER":
    time.sleep(3600)  # pservers serve until the trainers are done
for i in range(3):
    print(f"trainer {os.environ['PADDLE_TRAINER_ID']} pass {i}", flush=True)
"""


def test_a_submitted_job_runs_and_its_workers_and_logs_read_back(system, old_client, alice):
    c = old_client(alice)
    r = c.send("POST", "/api/v1/file/", params={"path": f"{A}/jobs/fit/train.py"}, files={"file": ("train.py", TRAIN)})
    assert r.json() == rec.OK
    c.replay(rec.SUBMIT, job="fit", package="./fit", dc="local")

    job = wait_state(Job.objects.get(name="fit"), JobState.SUCCEEDED, timeout=180)
    # the pservers are stopped once the trainers are done
    wait_for(lambda: not job.replicas.exclude(state__in=REPLICA_DONE).exists(), 60, what="the pserver to stop")
    jobs = c.replay(rec.GET_JOBS).json()["items"]
    assert [(j["metadata"]["name"], j["status"]["succeeded"], j["status"]["failed"]) for j in jobs] == [
        ("fit-trainer", 2, None)]
    assert jobs[0]["status"]["start_time"].endswith("Z") and jobs[0]["status"]["completion_time"]

    workers = {w["metadata"]["name"]: w for w in c.replay(rec.GET_WORKERS, job="fit").json()["items"]}
    for name in ("fit-trainer-0", "fit-trainer-1"):
        status = workers[name]["status"]
        assert status["phase"] == "Succeeded"
        assert status["container_statuses"][0]["state"]["terminated"]["exit_code"] == 0
    assert workers["fit-pserver-0"]["status"]["container_statuses"][0]["state"]["terminated"] is not None

    text = c.replay(rec.LOGS, job="fit").json()["msg"]
    for tid in (0, 1):
        assert f"====fit-trainer-{tid}====\n" + "".join(f"trainer {tid} pass {i}\n" for i in range(3)) in text
    assert job.state == JobState.SUCCEEDED

    # the client's `kill` of the ended job removes it (it never sends -rm), and frees its name
    c.replay(rec.KILL, job="fit")
    assert c.replay(rec.GET_JOBS).json()["items"] == []
    wait_for(lambda: not Job.objects.filter(name="fit").exists(), 60, what="the killed job's removal")
    c.send("POST", "/api/v1/file/", params={"path": f"{A}/jobs/fit/train.py"}, files={"file": ("train.py", TRAIN)})
    c.replay(rec.SUBMIT, job="fit", package="./fit", dc="local")
    assert Job.objects.get(name="fit").pk != job.pk  # a new job under the old name
