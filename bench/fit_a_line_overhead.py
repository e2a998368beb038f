"""examples/fit_a_line (2 pservers + 2 trainers, 10 passes) through the service, against
`python -m paddle.distributed.fleet.launch` running the same program in the same runtime.

Service time: submit until the job is Succeeded (the package is already in storage and the
runtime environment built, as for any job after the first). Baseline: fleet.launch from start to
exit. Goal: ratio <= 1.2.
"""

import os
import shutil
import subprocess
import tempfile
import time

from common import ROOT, median, service, wait

EXAMPLE = ROOT / "examples" / "fit_a_line"
ROUNDS = 3


def fleet_launch(bin_dir) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        work = shutil.copytree(EXAMPLE, f"{tmp}/pkg")
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": tmp, "PADDLE_INIT_NUM_PASSES": "10",
               "PADDLE_JOB_NAME": "bench", "PADDLE_PFS_HOME": tmp, "PYTHONUNBUFFERED": "1"}
        start = time.perf_counter()
        subprocess.run([f"{bin_dir}/python", "-m", "paddle.distributed.fleet.launch", "--server_num=2",
                        "--worker_num=2", "--log_dir", f"{tmp}/log", "train.py"], cwd=work, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        if "pass 10 loss" not in open(f"{tmp}/log/workerlog.0").read():
            raise SystemExit("fleet.launch run did not train 10 passes")
    return elapsed


def through_service(user, n: int) -> float:
    from jobs import services
    from jobs.models import Job
    from pfs.paths import home

    pkg = home(user, "local").child("examples", "fit_a_line")
    start = time.perf_counter()
    job = services.submit_job(user, {"name": f"fit-{n}", "package": pkg.virtual, "entry": "python train.py",
                                     "pservers": 2, "trainers": 2, "passes": 10})
    wait(lambda: Job.objects.get(pk=job.pk).state in ("Succeeded", "Failed"), timeout=1200)
    elapsed = time.perf_counter() - start
    job.refresh_from_db()
    if job.state != "Succeeded":
        raise SystemExit(f"job failed: {job.message}")
    return elapsed


def main() -> None:
    with service() as user:
        through_service(user, 0)  # first job builds the paddlepaddle runtime once
        from jobs.backends.local import runtime

        bin_dir = runtime.ensure_env((EXAMPLE / "requirements.txt").read_text())
        base = median([fleet_launch(bin_dir) for _ in range(ROUNDS)])
        svc = median([through_service(user, n) for n in range(1, ROUNDS + 1)])
    print(f"fleet.launch, 2 pservers + 2 trainers, 10 passes: {base:6.2f} s (median of {ROUNDS})")
    print(f"through PaddleCloud, submit -> Succeeded:         {svc:6.2f} s")
    print(f"ratio service/fleet.launch: {svc / base:.2f}x (goal <= 1.2x: {'met' if svc / base <= 1.2 else 'NOT met'})")


if __name__ == "__main__":
    os.environ.setdefault("KILL_GRACE_SECONDS", "10")
    main()
