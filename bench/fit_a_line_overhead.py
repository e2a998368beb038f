"""examples/fit_a_line (2 pservers + 2 trainers, 10 passes) through the running service over
HTTP, against `python -m paddle.distributed.fleet.launch` running the same program in the same
runtime, round by round.

Service time: from the POST of the job until `GET /api/v2/jobs/<name>/` says Succeeded (polled
every 0.1 s; the package is the example bootstrap puts in the admin's storage, and the runtime
is built before the rounds, as for any job after the first). Baseline: fleet.launch from start to
exit. Goal: ratio <= 1.2. VENVS_ROOT is `make run`'s (var/venvs), so paddlepaddle is installed once.

Each replica asks for a quarter of the machine's CPUs (at most 1, the default; README's 500m on a
2-core machine), so the four together may use the whole machine, as fleet.launch's do. The local
backend enforces a replica's CPU (a cgroup's CFS quota): at 250m each on 2 cores the job had half
the machine, and importing paddle took a replica 2.7-2.9 s against 0.75 s at 1 CPU.

    .venv/bin/python bench/fit_a_line_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from report import Row, emit
from service import ROOT, Service

EXAMPLE = ROOT / "examples" / "fit_a_line"
PACKAGE = "/pfs/local/home/admin/examples/fit_a_line"
CPU = f"{min(1000, 1000 * (os.cpu_count() or 1) // 4)}m"  # per replica: the four share the machine


def fleet_launch(bin_dir: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        work = shutil.copytree(EXAMPLE, f"{tmp}/pkg")
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": tmp, "PADDLE_INIT_NUM_PASSES": "10",
               "PADDLE_JOB_NAME": "bench", "PADDLE_PFS_HOME": tmp, "PYTHONUNBUFFERED": "1"}
        start = time.perf_counter()
        subprocess.run([f"{bin_dir}/python", "-m", "paddle.distributed.fleet.launch", "--server_num=2",
                        "--worker_num=2", "--log_dir", f"{tmp}/log", "train.py"], cwd=work, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elapsed = time.perf_counter() - start
        if "pass 10 loss" not in Path(f"{tmp}/log/workerlog.0").read_text():
            raise SystemExit("fleet.launch run did not train 10 passes")
    return elapsed


def through_service(svc: Service, name: str) -> float:
    assert svc.api is not None
    start = time.perf_counter()
    res = svc.api.post("/api/v2/jobs/", json={"name": name, "package": PACKAGE, "entry": "python train.py",
                                               "pservers": 2, "trainers": 2, "passes": 10, "cpu": CPU,
                                               "pscpu": CPU})
    assert res.status_code == 201, res.text
    while (job := svc.api.get(f"/api/v2/jobs/{name}/").json())["state"] not in ("Succeeded", "Failed", "Killed"):
        time.sleep(0.1)
    elapsed = time.perf_counter() - start
    if job["state"] != "Succeeded":
        raise SystemExit(f"job {name} {job['state']}: {job['message']}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with Service(name="fit", env={"VENVS_ROOT": os.environ.get("VENVS_ROOT", str(ROOT / "var" / "venvs"))}) as svc:
        through_service(svc, "fit-0")  # builds the paddlepaddle runtime once
        bin_dir = svc.django("from jobs.backends.local import runtime; "
                             f"print(runtime.ensure_env(open({str(EXAMPLE / 'requirements.txt')!r}).read()))"
                             ).strip().splitlines()[-1]
        base, times = [], []
        for n in range(1, args.rounds + 1):
            base.append(fleet_launch(bin_dir))
            times.append(through_service(svc, f"fit-{n}"))
            print(f"round {n}: fleet.launch {base[-1]:.2f} s, service {times[-1]:.2f} s", flush=True)
    b, s = statistics.median(base), statistics.median(times)
    emit([Row("fit_a_line 2 ps + 2 trainers, 10 passes: submit -> Succeeded", f"{b:.2f} s fleet.launch",
              f"{s:.2f} s", f"{s / b:.2f}x", "<= 1.2x", s / b <= 1.2)], f"fit_a_line, median of {args.rounds}")


if __name__ == "__main__":
    main()
