"""The `paddle` command as seeds 001 and 000 write it, against the live server over real HTTP.
Examples are the seeds' own (datacenter `local`, user alice); real jobs run where the seed says
something happens to processes (cancel kills, k8s job runs `python -m`)."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout

import pytest
import yaml
from tests.support import wait_for

from .conftest import Result, put_files, write_config

pytestmark = pytest.mark.django_db(transaction=True)


def paddle(*argv: str) -> Result:
    """`paddle` in-process, output captured."""
    from paddlectl.cli.paddle import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def roomy(datacenter):
    datacenter.quotas.update(cpu_millicores=100_000, memory_bytes=1 << 40, max_running_jobs=50, gpus=8)


@pytest.fixture
def seed001_config(server, clean_env):
    """~/.paddle/config in seed 001's form as the seed prints it, plus who alice is."""
    return write_config(clean_env / ".paddle" / "config", f"""apiVersion: v1
dockerRegistry:
  domain: domain.com //default is docker.io
  username: reguser
  password: regsecret
paddleServer: {server}
username: alice
password: password
""")


@pytest.fixture
def quick_start(tmp_path):
    pkg = tmp_path / "quick_start"
    pkg.mkdir()
    (pkg / "train.py").write_text("print('quick start')\n")
    (pkg / "requirements.txt").write_text("pillow\n")
    return pkg


def test_job_submit_with_every_seed_001_flag_creates_that_job(seed001_config, roomy, quick_start, alice):
    res = paddle("job", "submit", "--job-name=cluster-quickstart", f"--package-path={quick_start}",
                 "--entry-point=python train.py", "--input=/pfs/local/home/alice/quickstart/input",
                 "--output=/pfs/local/home/alice/quickstart/output", "--trainers=4", "--pservers=2",
                 "--base-image:domain.com/paddle/paddle:2.6.2", "--use-gpu=true", "--trainer-gpu-num=1",
                 "--env=NUM_PASS=5")
    assert res.code == 0, res.err
    assert "cluster-quickstart submitted (Queued)" in res.out
    from jobs.models import Job

    job = Job.objects.get(name="cluster-quickstart")
    assert (job.trainers, job.pservers, job.gpu, job.entry, job.image) == (
        4, 2, 1, "python train.py", "domain.com/paddle/paddle:2.6.2")
    assert job.env == {"PADDLE_INPUT_DIR": "/pfs/local/home/alice/quickstart/input",
                       "PADDLE_OUTPUT_DIR": "/pfs/local/home/alice/quickstart/output", "NUM_PASS": "5"}
    assert job.package == "/pfs/local/home/alice/jobs/cluster-quickstart"
    # the image comes from the config's dockerRegistry: its credentials became a registry of alice's
    assert (job.registry.server, job.registry.username, job.registry.password) == ("domain.com", "reguser",
                                                                                   "regsecret")


def test_image_from_another_registry_gets_no_credentials_and_one_registry_serves_many_jobs(
        seed001_config, roomy, quick_start, alice):
    from jobs.models import Job

    assert paddle("train", "--job-name=a", f"--package-path={quick_start}", "--base-image",
                  "paddlepaddle/paddle:2.6.2").code == 0
    assert Job.objects.get(name="a").registry is None
    for name in ("b", "c"):
        assert paddle("train", f"--job-name={name}", f"--package-path={quick_start}",
                      "--base-image=domain.com/x:1").code == 0
    assert Job.objects.get(name="b").registry == Job.objects.get(name="c").registry
    from accounts.models import Registry

    assert Registry.objects.filter(user=alice).count() == 1


def test_paths_outside_pfs_are_inside_the_home_and_use_gpu_false(seed001_config, roomy, quick_start):
    from jobs.models import Job

    res = paddle("train", "--job-name=quickstart", f"--package-path={quick_start}", "--input=/quickstart/input",
                 "--output=/pfs/local/user/alice/quickstart/output", "--use-gpu=false", "--trainer-gpu-num=2")
    assert res.code == 0, res.err
    job = Job.objects.get(name="quickstart")
    assert job.gpu == 0 and job.env == {"PADDLE_INPUT_DIR": "/pfs/local/home/alice/quickstart/input",
                                        "PADDLE_OUTPUT_DIR": "/pfs/local/home/alice/quickstart/output"}


def test_bad_flag_values_are_usage_errors(seed001_config, quick_start):
    res = paddle("job", "submit", "--job-name=x", f"--package-path={quick_start}", "--use-gpu=maybe")
    assert res.code == 2 and "not true or false" in res.err
    res = paddle("job", "submit", "--job-name=x")
    assert res.code == 2 and "--package-path" in res.err
    res = paddle("job", "submit", "--job-name=x", f"--package-path={quick_start}", "--env=NOEQUALS")
    assert res.code == 2 and "NAME=VALUE" in res.err


def test_list_status_and_json_output(seed001_config, roomy, quick_start):
    assert paddle("train", "--job-name=one", f"--package-path={quick_start}", "--trainers=2",
                  "--pservers=1").code == 0
    res = paddle("list")
    assert res.code == 0 and res.lines[0].split()[:2] == ["NAME", "STATE"] and res.lines[1].split()[:2] == [
        "one", "Queued"]
    assert [j["name"] for j in json.loads(paddle("job", "list", "-o", "json").out)] == ["one"]
    res = paddle("status", "one")
    assert res.code == 0 and "job one: Queued" in res.out
    assert {line.split()[0] for line in res.lines[2:]} == {"pserver-0", "trainer-0", "trainer-1"}
    assert json.loads(paddle("status", "one", "-o", "json").out)["state"] == "Queued"
    res = paddle("status", "nope")
    assert res.code == 1 and "job 'nope' not found" in res.err


def test_version_names_client_server_and_installed_paddlepaddle(seed001_config, monkeypatch):
    from paddlectl.cli import paddle as paddle_cli

    monkeypatch.setattr(paddle_cli, "paddlepaddle_version", lambda: "3.3.1")
    res = paddle("version")
    assert res.code == 0, res.err
    assert "PaddlePaddle client (paddlectl) 0.1.0" in res.out and "PaddleCloud server" in res.out
    assert "PaddlePaddle 3.3.1 (installed here)" in res.out


def test_upload_then_download_round_trip(seed001_config, alice, tmp_path, settings):
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "train" / "train.txt-00000").write_bytes(os.urandom(200_000))
    res = paddle("upload", str(data), "/pfs/local/home/alice/quickstart")
    assert res.code == 0, res.err
    stored = settings.PFS_ROOT / "local" / "home" / "alice" / "quickstart" / "data" / "train" / "train.txt-00000"
    assert stored.read_bytes() == (data / "train" / "train.txt-00000").read_bytes()
    back = tmp_path / "back"
    res = paddle("download", "/pfs/local/home/alice/quickstart/data", str(back))
    assert res.code == 0, res.err
    assert (back / "data" / "train" / "train.txt-00000").read_bytes() == stored.read_bytes()
    assert paddle("upload", str(data)).code == 2
    assert paddle("download", str(back)).code == 2


def test_upload_and_download_take_a_directory_in_the_home_as_input_does(seed001_config, alice, tmp_path, settings):
    """`paddle upload a.csv /quickstart/input`: a destination outside /pfs is inside your home, as
    seed 001 writes --input; downloads read paths the same way."""
    (tmp_path / "a.csv").write_text("1,2\n")
    res = paddle("upload", str(tmp_path / "a.csv"), "/quickstart/input")
    assert res.code == 0, res.err
    home = settings.PFS_ROOT / "local" / "home" / "alice"
    assert (home / "quickstart" / "input" / "a.csv").read_text() == "1,2\n"
    res = paddle("download", "/quickstart/input/a.csv", str(tmp_path / "back"))
    assert res.code == 0, res.err
    assert (tmp_path / "back" / "a.csv").read_text() == "1,2\n"
    res = paddle("upload", str(tmp_path / "a.csv"), "../bob/input")
    assert res.code == 2 and "'..' is not allowed" in res.err


def test_a_flag_written_with_a_space_after_its_equals_sign_takes_the_next_word(seed001_config, roomy, tmp_path,
                                                                              monkeypatch):
    from jobs.models import Job

    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "train.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)
    res = paddle("k8s", "job", "spaced", "--package-path=", "./demo", "--module=", "demo.train",
                 "--trainer-count=", "2", "--input=", "/quickstart/input")
    assert res.code == 0, res.err
    job = Job.objects.get(name="spaced")
    assert (job.entry, job.trainers, job.env["PADDLE_INPUT_DIR"]) == (
        "python -m demo.train", 2, "/pfs/local/home/alice/quickstart/input")


def test_mpi_answers_that_jobs_run_through_the_datacenters(seed001_config):
    res = paddle("mpi", "job", "x", "--trainer-count=2")
    assert res.code == 1 and "datacenters' backends" in res.err and "paddle k8s job" in res.err


def test_other_words_are_paddlectls_commands(seed001_config, alice):
    put_files(alice, {"in/a.txt": "1"})
    res = paddle("ls", "/pfs/local/home/alice/in", "-o", "name")
    assert res.code == 0 and res.lines == ["a.txt"], res.err
    res = paddle("get", "datacenters", "-o", "name")
    assert res.code == 0 and res.lines == ["local"]


def test_help_shows_the_seed_forms(clean_env):
    res = paddle("--help")
    assert res.code == 0
    assert "paddle job submit --job-name=NAME --package-path=DIR" in res.out
    assert "paddle k8s job <job-name> --package-path=DIR --module=PKG.MODULE" in res.out
    res = paddle("k8s", "job", "-h")
    assert res.code == 0 and "--pserver-count" in res.out and "python -m demo.train" in res.out


def test_login_keeps_the_seed_001_file_form(seed001_config):
    res = paddle("login")
    assert res.code == 0, res.err
    data = yaml.safe_load(seed001_config.read_text())
    assert data["apiVersion"] == "v1" and data["dockerRegistry"]["username"] == "reguser"
    assert "password" not in data and len(data["token"]) > 20 and data["username"] == "alice"
    assert paddle("list").code == 0
    assert paddle("logout").code == 0
    assert "token" not in yaml.safe_load(seed001_config.read_text())


# --- real processes -----------------------------------------------------------------------------
SLEEPER = "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"


def test_cancel_kills_the_running_processes(system, seed001_config, roomy, tmp_path):
    from tests.support import job_processes

    from jobs.models import Job

    pkg = tmp_path / "sleeper"
    pkg.mkdir()
    (pkg / "train.py").write_text(SLEEPER)
    assert paddle("job", "submit", "--job-name=sleepy", f"--package-path={pkg}", "--trainers=2",
                  "--pservers=1").code == 0
    from paddlectl import Client

    with Client.from_config() as client:
        client.wait("sleepy", states="Running", timeout=120)
    job = Job.objects.get(name="sleepy")
    assert job_processes(job)
    res = paddle("cancel", "sleepy")
    assert res.code == 0 and "job sleepy cancelled" in res.out
    wait_for(lambda: Job.objects.get(name="sleepy").state == "Killed", 60, what="the job to be Killed")
    wait_for(lambda: not job_processes(job), 60, what="its processes to be gone")


DEMO_TRAIN = '''import os, sys, time
if os.environ.get("TRAINING_ROLE") == "PSERVER":
    time.sleep(600)  # parameter servers serve until the trainers are done
home, dc, user = os.environ["PADDLE_PFS_HOME"], os.environ["PADDLE_CLOUD_CURRENT_DATACENTER"], \\
    os.environ["PADDLE_CLOUD_USERNAME"]
prefix = f"/pfs/{dc}/home/{user}"

def where(path):
    return home + path[len(prefix):] if path.startswith(prefix) else path

from demo.helper import shout
rank = os.environ["PADDLE_TRAINER_ID"]
text = open(os.path.join(where(os.environ["PADDLE_INPUT_DIR"]), "words.txt")).read()
out = where(os.environ["PADDLE_OUTPUT_DIR"])
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"result-{rank}.txt"), "w") as f:
    f.write(f"{__name__} {__package__} {shout(text)}")
'''


def test_k8s_job_runs_the_module_with_its_input_and_output(system, seed001_config, roomy, alice, tmp_path,
                                                           monkeypatch, settings):
    put_files(alice, {"demo-input/words.txt": "hello"})
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "__init__.py").write_text("")
    (demo / "train.py").write_text(DEMO_TRAIN)
    (demo / "helper.py").write_text("def shout(text):\n    return text.upper()\n")
    monkeypatch.chdir(tmp_path)
    # as seed 000 writes it: a space after `--package-path=`
    res = paddle("k8s", "job", "demo-job", "--package-path=", "./demo", "--module=demo.train", "--pserver-count=2",
                 "--trainer-count=4", "--output=/pfs/local/home/alice/demo-output",
                 "--input=/pfs/local/home/alice/demo-input")
    assert res.code == 0, res.err
    assert "2 pservers, 4 trainers" in res.out and "entry python -m demo.train" in res.out
    from paddlectl import Client

    with Client.from_config() as client:
        final = client.wait("demo-job", timeout=180)
    assert final["state"] == "Succeeded", final
    out = settings.PFS_ROOT / "local" / "home" / "alice" / "demo-output"
    assert sorted(p.name for p in out.iterdir()) == [f"result-{i}.txt" for i in range(4)]
    assert (out / "result-0.txt").read_text() == "__main__ demo HELLO"


def test_k8s_job_sharding_form_with_the_seeds_spellings(seed001_config, roomy, tmp_path, monkeypatch):
    from jobs.models import Job

    (tmp_path / "sharding-data").mkdir()
    (tmp_path / "sharding-data" / "main.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)
    res = paddle("k8s", "job", "sharding", "--pcakage-path=./sharding-data", "--module-name=sharding-data.main",
                 "--input=/pfs/local/home/alice/in", "--output=/pfs/local/home/alice/out")
    assert res.code == 0, res.err
    job = Job.objects.get(name="sharding")
    assert job.entry == "python -m sharding-data.main"
    assert job.env == {"PADDLE_INPUT_DIR": "/pfs/local/home/alice/in", "PADDLE_OUTPUT_DIR": "/pfs/local/home/alice/out"}


def test_seed_001_config_without_credentials_says_how_to_log_in(server, clean_env):
    write_config(clean_env / ".paddle" / "config", f"apiVersion: v1\ndockerRegistry:\n  domain: domain.com\n"
                 f"  username: u\n  password: p\npaddleServer: {server}\n")
    res = paddle("list")
    assert res.code == 1 and "no password or token" in res.err and "dockerRegistry" not in res.err


def test_dist_train_as_seed_001_calls_it(seed001_config, roomy, quick_start, monkeypatch):
    import paddlectl.dist
    from jobs.models import Job

    monkeypatch.chdir(quick_start)  # the seed's call names no package: the current directory
    job = paddlectl.dist.train(k8s_user="alice", k8s_pssword="password", job_name="quickstart", trainers=8,
                               pservers=4, input="/quickstart/input", output="/quickstart/output",
                               base_image="paddlepaddle/paddle:0.10.rc2", use_gpu=False)
    assert (job["trainers"], job["pservers"], job["image"], job["gpu"]) == (8, 4, "paddlepaddle/paddle:0.10.rc2", 0)
    assert Job.objects.get(name="quickstart").env == {"PADDLE_INPUT_DIR": "/pfs/local/home/alice/quickstart/input",
                                                      "PADDLE_OUTPUT_DIR": "/pfs/local/home/alice/quickstart/output"}


def test_seed_002_paddlejob_as_written_submits(seed001_config, roomy, alice):
    import paddlectl.job as job
    from paddlectl import Client

    put_files(alice, {"example/word2vec/train.py": "print(1)\n"})
    with pytest.warns(UserWarning):
        paddle_job = job.PaddleJob(
            pservers=3, runtime_image="yancey1989/paddle-job", job_name="paddle-job", namespace="yanxu",
            use_gpu=False, cpu_num=3, trainer_package_path="/pfs/local/home/alice/example/word2vec",
            entry_point="python train.py", cephfs_volume=job.CephFSVolume(monitors_addr="172.19.32.166:6789"))
    with Client.from_config() as client:
        created = client.submit(paddle_job)
    assert (created["pservers"], created["trainers"], created["cpu"], created["image"]) == (
        3, 3, "3", "yancey1989/paddle-job")
