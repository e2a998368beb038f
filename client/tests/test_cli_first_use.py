"""What a first user's scripts met (issue 22): a password from standard input, ages as kubectl
writes them, output in the order it happened when piped, submit without -entry, the cluster."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from .conftest import CLIENT_DIR, run_cli

pytestmark = pytest.mark.django_db(transaction=True)


def test_login_reads_the_password_from_standard_input(server, clean_env, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("password\n"))
    res = run_cli("login", "-endpoint", server, "-username", "alice", "-password-stdin", "-name", "local")
    assert res.code == 0, res.err
    entry = yaml.safe_load((clean_env / ".paddle" / "config").read_text())["datacenters"][0]
    assert "password" not in entry and len(entry["token"]) > 20
    monkeypatch.setattr(sys, "stdin", io.StringIO("wrong\n"))
    res = run_cli("login", "-endpoint", server, "-username", "alice", "-password-stdin", "-name", "local")
    assert res.code == 1
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    res = run_cli("login", "-endpoint", server, "-username", "alice", "-password-stdin")
    assert res.code == 2 and "standard input held no password" in res.err
    res = run_cli("login", "-username", "alice", "-password", "x", "-password-stdin", "-endpoint", server)
    assert res.code == 2 and "not both" in res.err


@pytest.mark.parametrize(("seconds", "shown"), [
    (5, "5s"), (119, "119s"), (120, "2m"), (312, "5m12s"), (45 * 60, "45m"), (3 * 3600 + 4 * 60, "3h4m"),
    (8 * 3600, "8h"), (30 * 3600, "30h"), (5 * 86400 + 3 * 3600, "5d3h"), (150 * 86400, "150d"),
    (2 * 365 * 86400 + 30 * 86400, "2y30d"), (9 * 365 * 86400, "9y"),
])
def test_ages_are_written_as_kubectl_writes_them(seconds, shown):
    from paddlectl.cli import output

    now = datetime(2026, 5, 1, tzinfo=timezone.utc)
    assert output.age((now - timedelta(seconds=seconds)).isoformat(), now) == shown


def test_get_jobs_shows_ages_and_wide_shows_the_times(config, alice):
    from tests.support import make_package

    from jobs import services
    from jobs.models import Job

    job = services.submit_job(alice, {"name": "aged", "package": make_package(alice, "aged", {"train.py": ""}),
                                      "entry": "python train.py"})
    from paddlectl.cli import output

    before = datetime.now(timezone.utc)
    started = before - timedelta(minutes=5, seconds=12)
    Job.objects.filter(pk=job.pk).update(state="Running", created=started - timedelta(seconds=30), started=started)
    header, row = run_cli("get", "jobs").lines
    took = math.ceil((datetime.now(timezone.utc) - before).total_seconds())
    cells = dict(zip(header.split(), row.split(), strict=False))
    # its age when the command ran: 5m12s, or a few seconds more on a busy machine
    ages = {output.age(started.isoformat(), before + timedelta(seconds=s)) for s in range(took + 1)}
    assert "5m12s" in ages and cells["START"] in ages and cells["COMP"] == "-"
    wide = run_cli("get", "jobs", "-o", "wide").out
    assert started.strftime("%Y-%m-%dT%H:%M") in wide


def test_piped_output_comes_in_the_order_it_happened(config, alice):
    from tests.support import make_package

    from jobs import services

    services.submit_job(alice, {"name": "first", "package": make_package(alice, "first", {"train.py": ""}),
                                "entry": "python train.py"})
    env = {**os.environ, "HOME": str(config.parent.parent),
           "PYTHONPATH": os.pathsep.join([str(CLIENT_DIR), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONUNBUFFERED", None)  # as on a user's machine: Python buffers a piped stdout
    # stdout and stderr into one pipe, as `paddlectl ... 2>&1 | tee log` gives them
    proc = subprocess.run([sys.executable, "-m", "paddlectl", "kill", "first", "ghost"], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0] == "job first killed" and "ghost" in lines[1], lines


def test_submit_without_entry_runs_train_py_or_says_what_is_missing(config, alice, tmp_path):
    from jobs.models import Job

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "main.py").write_text("print(1)\n")
    res = run_cli("submit", "-jobname", "noentry", str(package))
    assert res.code == 2 and "has no train.py to run by default" in res.err and "-entry" in res.err
    assert not Job.objects.filter(name="noentry").exists()
    (package / "train.py").write_text("print(1)\n")
    res = run_cli("submit", "-jobname", "noentry", str(package))
    assert res.code == 0, res.err
    assert Job.objects.get(name="noentry").entry == "python train.py"
    assert "submitted (Queued): 1 pserver, 1 trainer" in res.out


def test_get_cluster_shows_every_datacenter_with_its_jobs(config, alice, bob, datacenter):
    from tests.support import make_package

    from jobs import services
    from jobs.models import Job

    for user, name in ((alice, "mine"), (bob, "bobs-secret")):
        services.submit_job(user, {"name": name, "package": make_package(user, name, {"train.py": ""}),
                                   "entry": "python train.py", "mode": "collective", "trainers": 2, "cpu": "2"})
    Job.objects.filter(name="mine").update(state="Running")
    Job.objects.filter(name="bobs-secret").update(queue_position=1, reason="NoCapacity", message="needs 4 CPU")
    res = run_cli("get", "cluster")
    assert res.code == 0, res.err
    assert res.lines[0].startswith("datacenter local (local): CPU 4 of ")
    assert "1 running, 1 queued" in res.lines[0]
    rows = [line.split() for line in res.lines[2:]]
    assert rows[0][:4] == ["-", "Running", "alice", "mine"] and rows[1][:4] == ["1", "Queued", "bob", "-"]
    assert "bobs-secret" not in res.out and "needs 4 CPU" not in res.out
    data = yaml.safe_load(run_cli("get", "cluster", "-o", "yaml").out)
    assert data[0]["queue"][0]["name"] is None and data[0]["running"][0]["name"] == "mine"
