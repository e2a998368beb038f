"""Every bench in `make bench` still runs against the service it starts, at a size that takes
seconds: a bench that breaks (log_lag.py once read the job's build log as its replica's lines)
gives no figure at all. Whether a goal is met is the bench's own business, not this test's.
Not here: fit_a_line_overhead.py (real PaddlePaddle trainings: the e2e tests run those) and
k8s_status_sync.py (it exits 1 when its goal is missed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

# bench -> (arguments, environment) that make it small; each row names a measure it must report.
SMALL = {
    "memory": ([], {}, "idle service tree RSS"),
    "launch": (["--rounds", "1"], {}, "submit -> 4 replicas Running"),
    "job_list": ([], {"BENCH_JOBS": "300", "BENCH_REQUESTS": "3"}, "API first page"),
    "web": ([], {"BENCH_ROUNDS": "1", "BENCH_SECONDS": "1"}, "job detail req/s"),
    "log_lag": (["--viewers", "3", "--rate", "200", "--seconds", "2"], {}, "viewers of 200 lines/s"),
    "transfer": (["--size-mib", "8", "--rounds", "1"], {"BENCH_SETTLE": "0"}, "paddlectl cp 8 MiB upload"),
    "cli_start": ([], {"BENCH_ROUNDS": "1"}, "paddlectl ls <home>"),
    "legacy_upload": (["--size-mib", "8", "--rounds", "1"], {}, ""),
    "recordio": (["--mb", "2", "--fallback-mb", "1", "--repeat", "1"], {}, ""),
}


@pytest.mark.parametrize("bench", sorted(SMALL))
def test_the_bench_runs_and_reports_its_rows(bench, tmp_path):
    args, env, measure = SMALL[bench]
    results = tmp_path / "results.jsonl"
    # A user's shell, not this test run's (its settings export a Redis socket, queue names and a
    # kill grace of their own). With DATABASE_URL, each bench's service makes a database of its own.
    shell = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LANG", "TMPDIR", "DATABASE_URL")}
    environ = {**shell, **env, "BENCH_RESULTS": str(results)}
    done = subprocess.run([sys.executable, f"bench/{bench}.py", *args], cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert rows and all(row["project"] for row in rows), rows
    assert any(row["measure"].startswith(measure) or measure in row["measure"] for row in rows), rows
