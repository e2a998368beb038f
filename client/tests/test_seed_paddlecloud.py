"""`paddlecloud`, seed 003's name for the client: its example session run as written (datacenter
`local`, user alice) with a real job, its config map form with client certificates against a TLS
front that requires them, and `--output DIR` beside `-o FORMAT`."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from .conftest import Result, put_files, write_config
from .tls_proxy import CertAuthority, ClientCertProxy

pytestmark = pytest.mark.django_db(transaction=True)


def paddlecloud(*argv: str) -> Result:
    from paddlectl.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv], "paddlecloud")
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def roomy(datacenter):
    datacenter.quotas.update(cpu_millicores=100_000, memory_bytes=1 << 40, max_running_jobs=50)


@pytest.fixture
def map_config(server, clean_env):
    """Seed 003's map form (plus alice's password, which seed 003 leaves to the certificates)."""
    return write_config(clean_env / ".paddle" / "config", f"""datacenter1:
  username: alice
  password: password
  endpoint: {server}
""")


TRAIN = '''import os, time
if os.environ.get("TRAINING_ROLE") == "PSERVER":
    time.sleep(600)
rank = os.environ["PADDLE_TRAINER_ID"]
home = os.environ["PADDLE_PFS_HOME"]
lines = open(os.path.join(home, "job_word_emb", "train", "train.txt-00000")).read().split()
print(f"trainer {rank} read {len(lines)} words", flush=True)
if rank == "0":
    os.makedirs(os.path.join(home, "job_word_emb", "output"), exist_ok=True)
    with open(os.path.join(home, "job_word_emb", "output", "model.txt"), "w") as f:
        f.write(" ".join(sorted(set(lines))))
'''


def test_seed_003_example_session_as_written(system, map_config, roomy, tmp_path, monkeypatch, settings):
    job_dir = tmp_path / "job_word_emb"
    (job_dir / "modules").mkdir(parents=True)
    (job_dir / "modules" / "train.py").write_text(TRAIN)
    (job_dir / "dict1.pickle").write_bytes(b"\x80\x04N.")
    (job_dir / "data" / "train").mkdir(parents=True)
    (job_dir / "data" / "train" / "train.txt-00000").write_text("b a c a\n")
    (job_dir / "data" / "test").mkdir()
    (job_dir / "data" / "test" / "test.txt-00000").write_text("x\n")
    monkeypatch.chdir(tmp_path)

    # upload training data to cloud (like cp -r, a new destination receives data's contents); the
    # paths name the config entry, datacenter1, which stands for the server's datacenter (local)
    res = paddlecloud("pfs", "cp", "-r", "./job_word_emb/data", "/pfs/datacenter1/home/alice/job_word_emb")
    assert res.code == 0, res.err
    home = settings.PFS_ROOT / "local" / "home" / "alice"
    assert (home / "job_word_emb" / "train" / "train.txt-00000").read_text() == "b a c a\n"
    res = paddlecloud("pfs", "ls", "-r", "/pfs/datacenter1/home/alice/job_word_emb", "-o", "name")
    assert res.code == 0 and res.lines == ["test", "test/test.txt-00000", "train", "train/train.txt-00000"], res
    # submit a v1 paddle training job
    res = paddlecloud("submit", "./job_word_emb", "-p", "4", "-c", "2", "-m", "10Gi", "-t", "modules/train.py")
    assert res.code == 0, res.err
    assert "job job-word-emb submitted" in res.out and "4 pservers, 4 trainers" in res.out
    # list running jobs
    res = paddlecloud("jobs")
    assert res.code == 0 and res.lines[0].split()[0] == "NAME" and res.lines[1].split()[0] == "job-word-emb"
    from paddlectl import Client

    with Client.from_config() as client:
        assert client.wait("job-word-emb", timeout=180)["state"] == "Succeeded"
    # get job logs: no name means the latest job
    res = paddlecloud("logs")
    assert res.code == 0, res.err
    assert {f"[trainer-{i}] trainer {i} read 4 words" for i in range(4)} <= set(res.lines)
    # download the output: a directory, without -r as the seed writes it
    res = paddlecloud("pfs", "cp", "/pfs/datacenter1/home/alice/job_word_emb/output", "./output")
    assert res.code == 0, res.err
    assert (tmp_path / "output" / "model.txt").read_text() == "a b c"


def test_pfs_paths_name_the_config_entry_or_the_servers_datacenter(map_config, alice, tmp_path, settings):
    (tmp_path / "w.txt").write_text("w")
    for dest in ("/pfs/datacenter1/home/alice/a.txt", "/pfs/local/home/alice/b.txt",
                 "/pfs/datacenter1/user/alice/c.txt"):
        res = paddlecloud("pfs", "cp", str(tmp_path / "w.txt"), dest)
        assert res.code == 0, res.err
    res = paddlecloud("pfs", "ls", "/pfs/datacenter1/home/alice", "-o", "name")
    assert res.lines == ["a.txt", "b.txt", "c.txt"], res
    assert paddlecloud("pfs", "rm", "/pfs/datacenter1/home/alice/a.txt").code == 0
    assert sorted(p.name for p in (settings.PFS_ROOT / "local/home/alice").glob("*.txt")) == ["b.txt", "c.txt"]
    # an entry whose `datacenter:` names the server's datacenter: its name maps the same way
    write_config(map_config, map_config.read_text().replace("datacenter1:", "mine:") + "  datacenter: local\n")
    res = paddlecloud("pfs", "ls", "/pfs/mine/home/alice", "-o", "name")
    assert res.code == 0 and res.lines == ["b.txt", "c.txt"], res.err


def test_jobs_lists_running_ones_unless_all_and_logs_needs_a_job(map_config, alice):
    res = paddlecloud("logs")
    assert res.code == 1 and "you have no jobs yet" in res.err
    from jobs import services
    from jobs.models import Job

    put_files(alice, {"p/t.py": "print(1)\n"})
    for name in ("older", "newer"):
        services.submit_job(alice, {"name": name, "package": "/pfs/local/home/alice/p", "entry": "python t.py",
                                    "mode": "collective", "trainers": 1})
    Job.objects.filter(name="older").update(state="Succeeded")
    assert [line.split()[0] for line in paddlecloud("jobs").lines[1:]] == ["newer"]
    assert sorted(paddlecloud("jobs", "-a", "-o", "name").lines) == ["newer", "older"]
    res = paddlecloud("logs")  # the latest job has no lines yet: nothing printed, no error
    assert res.code == 0, res.err


def test_usage_and_help_name_paddlecloud(clean_env):
    res = paddlecloud("--help")
    assert res.code == 0 and res.out.startswith("Usage: paddlecloud <flags>") and "jobs" in res.out
    res = paddlecloud("help", "logs")
    assert "paddlecloud logs [-n N] [-f] [-w worker] [<job>]" in res.out
    res = paddlecloud("get")
    assert res.code == 2 and "paddlecloud help get" in res.err
    res = paddlecloud("completion", "bash")
    assert "complete -o default -F _paddlectl paddlecloud" in res.out and "$(paddlecloud get jobs" in res.out


# --- --output as a directory ------------------------------------------------------------------------
def test_output_directory_and_output_format_never_collide(map_config, alice):
    put_files(alice, {"pkg/train.py": "print(1)\n"})
    res = paddlecloud("submit", "-jobname", "io", "--input=/pfs/local/home/alice/in",
                      "--output=/pfs/local/user/alice/out", "-o", "json", "/pfs/local/home/alice/pkg")
    assert res.code == 0, res.err
    assert json.loads(res.out)["env"] == {"PADDLE_INPUT_DIR": "/pfs/local/home/alice/in",
                                          "PADDLE_OUTPUT_DIR": "/pfs/local/home/alice/out"}
    res = paddlecloud("submit", "-jobname", "io2", "-output", "yaml", "-output", "./out-dir",
                      "/pfs/local/home/alice/pkg")
    assert res.code == 0, res.err
    assert "PADDLE_OUTPUT_DIR: /pfs/local/home/alice/out-dir" in res.out
    # where no directory is taken, a non-format is a usage error naming the formats
    res = paddlecloud("get", "jobs", "--output=/pfs/local/home/alice/out")
    assert res.code == 2 and "not an output format" in res.err and "json" in res.err
    assert paddlecloud("submit", "-o", "/pfs/x", "/pfs/local/home/alice/pkg").code == 2
    res = paddlecloud("submit", "-jobname", "io3", "--output=../bob/out", "/pfs/local/home/alice/pkg")
    assert res.code == 2 and "'..' is not allowed" in res.err


def test_seed_004_file_dest_in_the_user_form(map_config, alice, tmp_path, monkeypatch, settings):
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "a.txt").write_text("a")
    monkeypatch.chdir(tmp_path)
    res = paddlecloud("file", "dataset/", "/pfs/local/user/alice/ds")
    assert res.code == 0, res.err
    assert (settings.PFS_ROOT / "local" / "home" / "alice" / "ds" / "a.txt").read_text() == "a"
    res = paddlecloud("file", "dataset", "/pfs/local/user/bob/ds")
    assert res.code == 2 and "dest must be in your home" in res.err


# --- client certificates (seed 003) -------------------------------------------------------------
@pytest.fixture
def ca(tmp_path):
    return CertAuthority(tmp_path / "ca")


@pytest.fixture
def tls_front(live_server, ca):
    proxy = ClientCertProxy(live_server.url, ca)
    yield proxy
    proxy.close()


def cert_config(home, proxy: ClientCertProxy, ca: CertAuthority, *, cert: bool = True, password: bool = True):
    usercert, userkey = ca.issue("alice", server=False)
    text = "datacenter1:\n  username: alice\n"
    if cert:
        text += f"  usercert: {usercert}\n  userkey:  {userkey}\n"
    if password:
        text += "  password: password\n"
    text += f"  cacert: {ca.cert}\n  endpoint: {proxy.address}\n"
    return write_config(home / ".paddle" / "config", text)


def test_client_certificate_is_presented_to_a_server_that_requires_it(alice, clean_env, tls_front, ca, tmp_path):
    cert_config(clean_env, tls_front, ca)
    res = paddlecloud("get", "datacenters", "-o", "name")
    assert res.code == 0 and res.lines == ["local"], res.err
    (tmp_path / "w.txt").write_text("words")
    res = paddlecloud("pfs", "cp", str(tmp_path / "w.txt"), "/pfs/local/home/alice/w.txt")
    assert res.code == 0, res.err
    res = paddlecloud("pfs", "ls", "/pfs/local/home/alice", "-o", "name")
    assert res.code == 0 and "w.txt" in res.lines
    assert paddlecloud("login").code == 0  # login talks TLS with the certificate too
    assert paddlecloud("jobs").code == 0
    assert paddlecloud("logout").code == 0


def test_without_a_client_certificate_the_connection_is_refused_cleanly(alice, clean_env, tls_front, ca):
    cert_config(clean_env, tls_front, ca, cert=False)
    res = paddlecloud("jobs")
    assert res.code == 1 and "cannot reach https://" in res.err and "Traceback" not in res.err


def test_certificates_without_a_password_say_how_to_log_in(alice, clean_env, tls_front, ca):
    cert_config(clean_env, tls_front, ca, password=False)
    res = paddlecloud("jobs")
    assert res.code == 1 and "no password or token" in res.err and "login" in res.err


def test_unreadable_certificate_files_are_a_config_error(clean_env, tmp_path):
    write_config(clean_env / ".paddle" / "config", f"datacenter1:\n  username: alice\n  usercert: {tmp_path}/no.pem\n"
                 f"  userkey: {tmp_path}/no-key.pem\n  endpoint: dc1.paddlepaddle.org\n")
    res = paddlecloud("jobs")
    assert res.code == 1 and "cannot load the TLS files" in res.err
    write_config(clean_env / ".paddle" / "config", "datacenter1:\n  usercert: /x.pem\n  endpoint: dc1\n")
    res = paddlecloud("jobs")
    assert res.code == 1 and "needs both usercert and userkey" in res.err


def test_job_pushes_arrive_over_wss_with_the_client_certificate(alice, clean_env, ca):
    from tests.support import LiveASGI

    from jobs import services
    from paddlectl import Client
    from paddlectl.live import JobEvents

    put_files(alice, {"p/t.py": "print(1)\n"})
    services.submit_job(alice, {"name": "pushed", "package": "/pfs/local/home/alice/p", "entry": "python t.py",
                                "mode": "collective", "trainers": 1})
    with LiveASGI() as live:  # HTTP and websockets, as `make run` serves them
        proxy = ClientCertProxy(live.url, ca)
        try:
            cert_config(clean_env, proxy, ca)
            with Client.from_config() as client, JobEvents(client.api, "pushed") as events:
                assert events.url.startswith("wss://127.0.0.1:")
                assert events.connected.is_set()  # the handshake passed the TLS front
        finally:
            proxy.close()


def test_a_client_certificate_with_a_plain_http_endpoint_is_refused(clean_env, ca):
    usercert, userkey = ca.issue("alice", server=False)
    write_config(clean_env / ".paddle" / "config", f"datacenter1:\n  username: alice\n  usercert: {usercert}\n"
                 f"  userkey: {userkey}\n  endpoint: http://dc1.paddlepaddle.org\n")
    res = paddlecloud("jobs")
    assert res.code == 1 and "plain http:// endpoint" in res.err
