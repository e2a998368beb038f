"""Real jobs: packages uploaded from a local directory, run by the Celery worker and the jobs
watcher (the repo's `system` fixture), logs followed to the end over HTTP."""

from __future__ import annotations

import json

import pytest

from .conftest import run_cli

TRAIN = """import os, sys, time
from paddlectl_shim import say
rank = os.environ["PADDLE_TRAINER_ID"]
for i in range(40):
    say(f"trainer {rank} line {i}")
    time.sleep(0.02)
print(f"PADDLECLOUD_METRIC {{\\"step\\": 1, \\"loss\\": 0.5}}", flush=True)
print(f"trainer {rank} done", flush=True)
"""
SHIM = "def say(text):\n    print(text, flush=True)\n"


@pytest.fixture
def package(tmp_path):
    pkg = tmp_path / "hello_job"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "train.py").write_text(TRAIN.replace("from paddlectl_shim import say", "sys.path.insert(0, 'lib')\n"
                                                "from shim import say"))
    (pkg / "lib" / "shim.py").write_text(SHIM)
    return pkg


def test_submit_a_local_package_and_follow_its_logs_to_the_end(system, live_server, config, package, settings):
    res = run_cli("submit", "-jobname", "hello", "-mode", "collective", "-parallelism", "2", "-entry",
                  "python train.py", str(package))
    assert res.code == 0, res.err
    assert "Uploading package" in res.err and "Done" in res.err
    assert "hello submitted" in res.out and "/pfs/local/home/alice/jobs/hello" in res.out
    uploaded = settings.PFS_ROOT / "local" / "home" / "alice" / "jobs" / "hello"
    assert (uploaded / "lib" / "shim.py").read_text() == SHIM
    assert not [p.name for p in uploaded.parent.iterdir() if p.name.startswith(".")]

    res = run_cli("logs", "-f", "hello")
    assert res.code == 0, res.err
    for rank in (0, 1):
        mine = [line.split("] ", 1)[1] for line in res.lines if line.startswith(f"[trainer-{rank}] ")]
        assert mine == [f"trainer {rank} line {i}" for i in range(40)] + [
            'PADDLECLOUD_METRIC {"step": 1, "loss": 0.5}', f"trainer {rank} done"]
    assert "Succeeded" in res.err

    job = json.loads(run_cli("get", "jobs", "hello", "-o", "json").out)
    assert job["state"] == "Succeeded"
    workers = run_cli("get", "workers", "hello")
    assert workers.lines[1].split()[:2] == ["trainer-0", "Succeeded"]
    # the same name again is refused before anything is uploaded
    again = run_cli("submit", "-jobname", "hello", str(package))
    assert again.code == 1 and "already have a job named 'hello'" in again.err


def test_sdk_submits_a_paddlejob_from_a_local_directory_and_waits(system, live_server, client, package):
    from paddlectl import PaddleJob

    job = PaddleJob(job_name="sdk-job", entry_point="python train.py", trainer_package_path=str(package),
                    mode="collective", trainers=1, env={"GREETING": "hi"})
    progress = []
    created = client.submit(job, progress=lambda done, total: progress.append((done, total)))
    assert created["package"] == "/pfs/local/home/alice/jobs/sdk-job"
    assert progress and progress[-1][0] == progress[-1][1] > 0
    lines = [line.text for line in client.logs("sdk-job", follow=True, poll_interval=0.2)]
    assert lines[-1] == "trainer 0 done"
    assert client.wait("sdk-job", timeout=60)["state"] == "Succeeded"


def test_dist_train_wrapper(system, live_server, config, package):
    import paddlectl.dist

    job = paddlectl.dist.train(job_name="dist-job", package_path=str(package), trainers=1, mode="collective",
                               input="/pfs/local/home/alice/in", output="/pfs/local/home/alice/out", wait=True,
                               timeout=120)
    assert job["state"] == "Succeeded"
    assert job["env"] == {"PADDLE_INPUT_DIR": "/pfs/local/home/alice/in",
                          "PADDLE_OUTPUT_DIR": "/pfs/local/home/alice/out"}
