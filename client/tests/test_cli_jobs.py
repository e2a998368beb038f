"""Every job and account command against a live server over real HTTP. Job states are set in
the database where running real processes is not the point (test_real_job.py runs them)."""

from __future__ import annotations

import json
import stat

import pytest
import yaml
from tests.support import make_package

from .conftest import put_files, run_cli, run_subprocess, write_config

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pkg(alice):
    return make_package(alice, "pkg", {"train.py": "print('hi')\n"})


@pytest.fixture
def roomy(datacenter):
    datacenter.quotas.update(cpu_millicores=100_000, memory_bytes=1 << 40, max_running_jobs=50)


def make_job(user, name, pkg, state="Queued", replica_states=None, **fields):
    from jobs import services
    from jobs.models import Job

    job = services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "mode": "collective",
                                     "trainers": 2, **fields})
    if state != "Queued" or replica_states:
        Job.objects.filter(pk=job.pk).update(state=state)
        for replica, rstate in zip(job.replicas.order_by("role", "index"), replica_states or []):
            replica.state = rstate
            replica.save()
    return job


def test_login_stores_a_token_instead_of_the_password(config):
    res = run_cli("login")
    assert res.code == 0, res.err
    data = yaml.safe_load(config.read_text())
    entry = data["datacenters"][0]
    assert "password" not in entry and len(entry["token"]) > 20
    assert entry["username"] == "alice" and data["current-datacenter"] == "local"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert run_cli("get", "jobs").code == 0
    assert run_cli("logout").code == 0
    assert "token" not in yaml.safe_load(config.read_text())["datacenters"][0]


def test_login_from_nothing_creates_the_config(server, clean_env):
    res = run_cli("login", "-endpoint", server, "-username", "alice", "-password", "password", "-name", "local")
    assert res.code == 0, res.err
    path = clean_env / ".paddle" / "config"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert yaml.safe_load(path.read_text())["current-datacenter"] == "local"
    assert run_cli("get", "jobs", "-a").code == 0


def test_wrong_password_prints_the_servers_message(server, clean_env):
    res = run_cli("login", "-endpoint", server, "-username", "alice", "-password", "nope")
    assert res.code == 1
    assert "wrong username or password" in res.err and "Traceback" not in res.err


def test_token_from_the_environment_needs_no_file(server, alice, monkeypatch):
    from accounts.services import issue_token

    monkeypatch.setenv("PADDLECTL_ENDPOINT", server)
    monkeypatch.setenv("PADDLECTL_TOKEN", issue_token(alice))
    monkeypatch.setenv("PADDLECTL_USERNAME", "alice")
    res = run_cli("get", "datacenters", "-o", "name")
    assert res.code == 0 and res.lines == ["local"]
    monkeypatch.setenv("PADDLECTL_TOKEN", "bad")
    res = run_cli("get", "jobs")
    assert res.code == 1 and "Invalid token" in res.err


def test_password_config_reuses_one_cached_token(config, alice):
    from knox.models import AuthToken

    for _ in range(3):
        assert run_cli("get", "jobs").code == 0
    assert AuthToken.objects.filter(user=alice).count() == 1
    AuthToken.objects.filter(user=alice).delete()  # revoked on the server: a new one is fetched
    assert run_cli("get", "jobs").code == 0


def test_version_prints_client_and_server(config):
    res = run_cli("version")
    assert res.code == 0
    assert "paddlectl client 0.1.0" in res.out and "PaddleCloud server" in res.out
    assert json.loads(run_cli("version", "-o", "json").out)["server"]


def test_seed_004_submit_command_works_as_written(config, alice, roomy):
    put_files(alice, {"ctr_demo_package/trainer_config.py": "print(1)\n"})
    res = run_cli("submit", "-jobname", "my-paddlecloud-job", "-cpu", "1", "-gpu", "0", "-memory", "1Gi",
                  "-parallelism", "10", "-pscpu", "1", "-pservers", "3", "-psmemory", "1Gi", "-passes", "1",
                  "-entry", "python trainer_config.py", "/pfs/local/home/alice/ctr_demo_package")
    assert res.code == 0, res.err
    assert "my-paddlecloud-job submitted (Queued)" in res.out
    from jobs.models import Job

    job = Job.objects.get(name="my-paddlecloud-job")
    assert (job.trainers, job.pservers, job.cpu, job.memory, job.pscpu, job.psmemory, job.passes, job.entry) == (
        10, 3, "1", "1Gi", "1", "1Gi", 1, "python trainer_config.py")
    assert job.package == "/pfs/local/home/alice/ctr_demo_package"


def test_submit_extra_flags_mode_env_and_double_dash(config, pkg):
    res = run_cli("submit", "--jobname", "coll", "-mode", "collective", "-p", "2", "-env", "A=1", "-e", "B=x=y",
                  "-timeout", "60", "-o", "json", pkg)
    assert res.code == 0, res.err
    body = json.loads(res.out)
    assert (body["mode"], body["pservers"], body["trainers"], body["env"], body["timeout"]) == (
        "collective", 0, 2, {"A": "1", "B": "x=y"}, 60)


def test_seed_004_names_with_dots_and_capitals_are_submitted_and_shown_as_typed(config, alice, pkg):
    res = run_cli("submit", "-jobname", "My.Job", pkg)
    assert res.code == 0, res.err
    assert "job My.Job submitted (Queued)" in res.out
    assert "My.Job" in run_cli("get", "jobs", "-a").out
    workers = run_cli("get", "workers", "My.Job")
    assert workers.code == 0 and [line.split()[0] for line in workers.lines[1:]] == ["pserver-0", "trainer-0"]
    assert run_cli("logs", "My.Job").code == 0
    assert "job My.Job killed" in run_cli("kill", "My.Job").out


def test_ps_mode_pservers_default_to_parallelism(config, pkg):
    assert run_cli("submit", "-jobname", "ps", "-parallelism", "2", pkg).code == 0
    from jobs.models import Job

    assert Job.objects.get(name="ps").pservers == 2


def test_validation_errors_are_printed_field_by_field(config, pkg):
    res = run_cli("submit", "-jobname", "fine", "-memory", "lots", "-cpu", "many", pkg)
    assert res.code == 1
    assert "memory: " in res.err and "cpu: " in res.err and "Traceback" not in res.err
    res = run_cli("submit", "-jobname", "bad_name", pkg)
    assert res.code == 1 and "name: " in res.err
    res = run_cli("submit", "-jobname", "x", "-env", "novalue", pkg)
    assert res.code == 2


def test_get_jobs_lists_running_only_unless_all(config, alice, pkg):
    make_job(alice, "running", pkg, "Running", ["Running", "Running"])
    make_job(alice, "done", pkg, "Succeeded", ["Succeeded", "Succeeded"])
    res = run_cli("get", "jobs")
    assert res.code == 0
    assert "running" in res.out and "done" not in res.out and "STATE" in res.out
    assert run_cli("get", "jobs", "-a", "-o", "name").lines == ["done", "running"]
    wide = run_cli("get", "jobs", "-a", "-o", "wide").out
    assert "DATACENTER" in wide and "PACKAGE" in wide
    assert {j["name"] for j in json.loads(run_cli("get", "jobs", "-a", "-o", "json").out)} == {"running", "done"}
    one = yaml.safe_load(run_cli("get", "jobs", "running", "-o", "yaml").out)
    assert one["name"] == "running" and len(one["replicas"]) == 2
    res = run_cli("get", "jobs", "nope")
    assert res.code == 1 and "job 'nope' not found" in res.err


def test_get_workers_and_events(config, alice, pkg):
    make_job(alice, "wk", pkg, "Running", ["Running", "Pending"])
    res = run_cli("get", "workers", "wk")
    assert res.code == 0
    rows = [line.split() for line in res.lines[1:]]
    assert [r[:2] for r in rows] == [["trainer-0", "Running"], ["trainer-1", "Pending"]]
    assert "ENDPOINT" in run_cli("get", "workers", "wk", "-o", "wide").out
    res = run_cli("get", "events", "wk")
    assert res.code == 0 and "Submitted" in res.out
    assert run_cli("get", "workers").code == 2


def test_get_shows_restarts_of_workers_and_of_the_job(config, alice, pkg):
    from jobs.models import Job

    job = make_job(alice, "rs", pkg, "Running", ["Running", "Pending"])
    job.replicas.filter(index=1).update(restarts=2, reason="BackOff", message="restart 2 of 3 at 12:00:00 (attempt 2)")
    Job.objects.filter(pk=job.pk).update(restarts=1)
    res = run_cli("get", "workers", "rs", "-o", "wide")
    header, *rows = [line.split() for line in res.lines]
    assert header[:5] == ["NAME", "STATUS", "START", "RESTARTS", "EXIT"]
    assert rows[1][:5] == ["trainer-1", "Pending", "-", "2", "-"] and "BackOff" in rows[1]
    assert "RESTARTS" in run_cli("get", "jobs", "rs", "-o", "wide").out
    assert json.loads(run_cli("get", "jobs", "rs", "-o", "json").out)["restarts"] == 1


def test_get_quota_and_datacenters(config):
    res = run_cli("get", "quota")
    assert res.code == 0
    assert "cpu" in res.out and "8" in res.out and "running jobs" in res.out
    assert ["queued", "jobs", "0", "1000"] in [line.split() for line in res.lines]
    q = json.loads(run_cli("get", "quota", "-o", "json").out)
    assert q["limits"]["cpu_millicores"] == 8000
    assert "local" in run_cli("get", "datacenters").out


def test_registry_add_list_delete(config):
    res = run_cli("registry", "-username", "me", "-password", "pw", "-server", "registry.example.com",
                  "-name", "myreg")
    assert res.code == 0, res.err
    assert run_cli("registry", "add", "-username", "me", "-password", "pw", "-server", "r2.example.com",
                   "-name", "other").code == 0
    listed = run_cli("get", "registry")
    assert "myreg" in listed.out and "registry.example.com" in listed.out and "pw" not in listed.out
    dup = run_cli("registry", "-username", "me", "-password", "pw", "-server", "x", "-name", "myreg")
    assert dup.code == 1 and "name: " in dup.err
    assert run_cli("delete", "registry", "myreg").code == 0
    assert run_cli("delete", "registry", "-name", "other").code == 0
    assert run_cli("get", "registry", "-o", "name").out == ""
    res = run_cli("delete", "registry", "myreg")
    assert res.code == 1 and "registry 'myreg' not found" in res.err
    assert run_cli("registry", "-name", "x").code == 2


def test_kill_and_kill_rm(config, alice, pkg):
    make_job(alice, "victim", pkg, "Running", ["Running", "Running"])
    res = run_cli("kill", "victim")
    assert res.code == 0 and "victim killed" in res.out
    from jobs.models import Job

    assert Job.objects.get(name="victim").state == "Killed"
    again = run_cli("kill", "victim")
    assert again.code == 1 and "state: the job has already ended (Killed)" in again.err
    assert run_cli("kill", "-rm", "victim").code == 0
    assert run_cli("get", "jobs", "-a", "-o", "name").out == ""
    assert run_cli("kill", "ghost").code == 1
    make_job(alice, "other", pkg)
    assert run_cli("delete", "job", "other").code == 0


def test_logs_tail_worker_and_prefix(config, alice, pkg):
    from jobs.live import logstore

    job = make_job(alice, "lg", pkg, "Running", ["Running", "Running"])
    t0, t1 = job.replicas.order_by("index")
    logstore.append(t0, "".join(f"t0 line {i}\n" for i in range(20)).encode())
    logstore.append(t1, b"t1 only line\n")
    res = run_cli("logs", "lg")
    assert res.code == 0
    assert res.lines[:10] == [f"[trainer-0] t0 line {i}" for i in range(10, 20)]
    assert res.lines[10:] == ["[trainer-1] t1 only line"]
    res = run_cli("logs", "-n", "3", "-w", "trainer-0", "lg")
    assert res.lines == ["t0 line 17", "t0 line 18", "t0 line 19"]
    assert run_cli("logs", "-w", "lg-trainer-1", "lg").lines == ["t1 only line"]
    res = run_cli("logs", "-w", "trainer-7", "lg")
    assert res.code == 2 and "no worker 'trainer-7'" in res.err
    assert run_cli("logs", "nope").code == 1


def test_cli_as_a_subprocess(config, alice, pkg):
    make_job(alice, "sub", pkg, "Running", ["Running", "Running"])
    env = {"HOME": str(config.parent.parent)}
    res = run_subprocess("get", "jobs", "-o", "name", env=env)
    assert res.code == 0, res.err
    assert res.out.split() == ["sub"]
    res = run_subprocess("get", "jobs", "missing-job", env=env)
    assert res.code == 1 and "not found" in res.err and "Traceback" not in res.err
    assert run_subprocess("nonsense", env=env).code == 2


def test_completion_scripts(config):
    bash = run_cli("completion", "bash")
    assert bash.code == 0 and "complete -o default -F _paddlectl paddlectl" in bash.out and "-jobname" in bash.out
    assert "bashcompinit" in run_cli("completion", "zsh").out
    assert "submit" in run_cli("commands").lines
    assert "Subcommands for PFS:" in run_cli("help").out
    assert "-parallelism" in run_cli("help", "submit").out
    assert run_cli("flags").code == 0


def test_unreachable_server_is_a_clean_error(clean_env):
    write_config(clean_env / ".paddle" / "config",
                 "datacenters:\n- {name: x, username: a, token: t, endpoint: 'http://127.0.0.1:9'}\n")
    res = run_cli("get", "jobs")
    assert res.code == 1 and "cannot reach http://127.0.0.1:9" in res.err and "Traceback" not in res.err


def test_seed_003_short_flags_and_a_refused_upload_leaves_nothing(config, settings, tmp_path, monkeypatch):
    pkg = tmp_path / "job_word_emb"
    (pkg / "modules").mkdir(parents=True)
    (pkg / "modules" / "train.py").write_text("print('v1')\n")
    monkeypatch.chdir(tmp_path)
    res = run_cli("submit", "./job_word_emb", "-p", "2", "-c", "2", "-m", "2Gi", "-t", "modules/train.py")
    assert res.code == 0, res.err
    assert "-topology is deprecated" in res.err
    from jobs.models import Job

    job = Job.objects.get(name="job-word-emb")  # named after the directory
    assert (job.trainers, job.pservers, job.cpu, job.memory, job.entry, job.env) == (
        2, 2, "2", "2Gi", "python modules/train.py", {"TOPOLOGY": "modules/train.py"})
    res = run_cli("submit", "-jobname", "too-big", "-memory", "1000Gi", "-entry", "python modules/train.py",
                  "./job_word_emb")
    assert res.code == 1 and "memory" in res.err.lower()
    jobs_dir = settings.PFS_ROOT / "local" / "home" / "alice" / "jobs"
    assert sorted(p.name for p in jobs_dir.iterdir()) == ["job-word-emb"]


def test_get_jobs_follows_the_cursor_past_the_first_page(config, alice, datacenter):
    from jobs.models import Job

    Job.objects.bulk_create(
        Job(user=alice, datacenter=datacenter, name=f"job-{i}", k8s_name=f"job-{i}", state="Succeeded", mode="ps",
            pservers=1, trainers=1, package="/pfs/local/home/alice/pkg", entry="python train.py")
        for i in range(120))  # over two of the server's 50-job pages
    names = run_cli("get", "jobs", "-a", "-o", "name").lines
    assert sorted(names) == sorted(f"job-{i}" for i in range(120))
