"""`make run`'s process tree (paddleweb/run.py: a lock, then the Procfile under honcho), started
for real on a state directory of its own: every part reports in at /api/v2/health/, a second run
on the same state directory is refused without disturbing the first, and a worker killed with -9
takes the whole tree down with a message instead of leaving a service without a worker."""

import itertools
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from core import embedded_redis
from paddleweb import run
from tests.support import ROOT, wait_for

# The test run's own settings travel in the environment; the tree must use its defaults instead
# (SQLite and a bundled Redis in its state directory).
TEST_ONLY_ENV = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL", "PADDLECLOUD_REDIS_SOCKET",
                 "CELERY_QUEUE", "CHANNELS_PREFIX", "CACHE_PREFIX", "PFS_ROOT", "JOBS_ROOT", "LOGS_ROOT", "VENVS_ROOT",
                 "LAUNCHER_SOCKET", "JOB_UIDS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(port: int, query: str = "") -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/health/{query}", timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


_trees = itertools.count()


class Tree:
    def __init__(self, var):
        self.var, self.port = var, _free_port()
        self.env = {k: v for k, v in os.environ.items() if k not in TEST_ONLY_ENV}
        # A job uid range of its own (the launcher refuses one another instance holds).
        first = 20_000_000 + (os.getpid() % 997 * 64 + next(_trees) % 64) * 10_000
        self.env.update(PADDLECLOUD_VAR=str(var), PADDLECLOUD_PORT=str(self.port), JOB_UIDS=f"{first}-{first + 9_999}",
                        HEARTBEAT_INTERVAL="1", HEARTBEAT_TTL="3")
        self.log = var / "run.log"

    def start(self, *args) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "paddleweb.run", *args], cwd=settings.BASE_DIR,
                                env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def processes(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)


def _wait(predicate, seconds: float, what: str, tree: Tree):
    return wait_for(predicate, seconds, lambda: f"{what}; output:\n{tree.output()[-4000:]}", interval=0.2)


@contextmanager
def running_tree(var):
    """`make run`'s tree on `var`, once every part reported in; at the end nothing of it is left."""
    tree = Tree(var)
    tree.proc = tree.start()
    everything: list[psutil.Process] = []
    try:
        def all_up():
            assert tree.proc.poll() is None, f"make run ended:\n{tree.output()[-4000:]}"
            try:
                return _health(tree.port)[0] == 200
            except OSError:
                return False

        _wait(all_up, 240, "every part to report in", tree)
        everything = [psutil.Process(tree.proc.pid), *tree.processes()]
        yield tree
    finally:
        for p in everything:
            with suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        tree.proc.kill()
        tree.proc.wait()


@pytest.fixture(scope="module")
def state_dirs():
    """Where the trees' state directories go: not below pytest's own directories, which are root's
    alone (0700, set again by every pytest that starts), while the service account must reach them."""
    base = Path(tempfile.mkdtemp(prefix="paddlecloud-run-"))
    base.chmod(0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def tree(state_dirs):
    with running_tree(Path(tempfile.mkdtemp(dir=state_dirs))) as tree:
        yield tree


def _procfile_process(processes: list[psutil.Process], needle: str) -> psutil.Process:
    """The process a Procfile line started (honcho runs each line through `sh -c`)."""
    return next(p for p in processes if p.name() != "sh" and p.parent().name() == "sh"
                and needle in " ".join(p.cmdline()))


def _assert_the_tree_stops(tree: Tree, processes: list[psutil.Process], name: str) -> None:
    assert tree.proc.wait(60) == 1
    said = tree.output()
    assert "a process of the service exited" in said
    assert f"{name}.1 stopped (rc=-9)" in said or f"{name}.1 stopped (rc=137)" in said
    _wait(lambda: not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
          30, "every process of the tree to end", tree)


def test_every_part_reports_in_at_the_health_endpoint(tree):
    code, body = _health(tree.port)
    assert code == 200 and body == {"status": "ok"}  # each part's state is for staff (tests/test_health_api.py)
    for part in ("web", "db", "redis", "worker", "watcher"):
        assert _health(tree.port, f"?only={part}")[0] == 200, part


PARTS = {"web": "uvicorn", "worker": "paddleweb worker", "watcher": "watch_jobs", "redis": "redis-server"}


@pytest.mark.skipif(not ROOT, reason="started by a normal user, everything runs as that user")
def test_started_as_root_only_the_launcher_keeps_root(tree):
    account = pwd.getpwnam(settings.SERVICE_USER)
    processes = tree.processes()
    for name, needle in PARTS.items():
        part = _procfile_process(processes, needle)
        assert part.uids() == (account.pw_uid,) * 3, name
        assert part.gids().real == account.pw_gid, name
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{part.pid}/status").read_text().splitlines()
                      if ":\t" in line)
        assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == int(status["CapBnd"], 16) == 0, name
    launcher = _procfile_process(processes, "-m launcher")
    assert launcher.uids().real == 0
    assert "SecurityWarning" not in tree.output() and "superuser privileges" not in tree.output()
    assert Path(tree.var / "db.sqlite3").stat().st_uid == account.pw_uid  # the state directory is the account's
    assert f"running as {settings.SERVICE_USER!r}" in tree.output()


def test_a_second_run_on_the_same_state_directory_is_refused(tree):
    before = tree.output()
    second = tree.start()
    assert second.wait(60) == 1
    said = tree.output()[len(before):]
    assert "another `make run`" in said and f"pid {tree.proc.pid}" in said and str(tree.var) in said
    assert "started (pid=" not in said  # no second honcho, worker or Redis
    assert embedded_redis.is_up(str(tree.var / "redis.sock"))  # the first one's Redis is untouched
    assert _health(tree.port)[0] == 200


@pytest.mark.skipif(not ROOT, reason="started by a normal user, no part has more rights than that user")
def test_a_root_the_service_account_made_a_link_stops_the_start_and_changes_nothing(state_dirs):
    """The account owns the state directory: a link it leaves as a root must not lead the next
    start (as root, or the launcher's) to chown or write what it points to."""
    var = Path(tempfile.mkdtemp(dir=state_dirs))
    target = Path(tempfile.mkdtemp(dir=state_dirs))  # stands for /etc
    owner = target.stat().st_uid
    os.symlink(target, var / "logs")
    tree = Tree(var)
    proc = tree.start()
    try:
        assert proc.wait(120) != 0, tree.output()[-2000:]
    finally:  # were it to start after all, nothing of it is left
        with suppress(psutil.NoSuchProcess):
            for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
                with suppress(psutil.NoSuchProcess):
                    p.kill()
        proc.wait()
    said = tree.output()
    assert "not starting" in said and f"{var}/logs: logs is a symbolic link" in said, said[-2000:]
    assert target.stat().st_uid == owner and os.listdir(target) == []


def test_the_run_lock_is_never_taken_through_a_link_or_another_name(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("keep me")
    os.symlink(precious, tmp_path / "run.lock")
    os.link(precious, tmp_path / "other.lock")
    for lock in ("run.lock", "other.lock"):
        with pytest.raises(SystemExit, match="not a plain file of its own"):
            run._lock(str(tmp_path / lock))
    assert precious.read_text() == "keep me"
    fd = run._lock(str(tmp_path / "fresh.lock"))
    assert fd is not None
    os.close(fd)


def test_a_second_bundled_redis_leaves_the_first_ones_socket_alone(tree):
    second = subprocess.run([sys.executable, "-m", "core.embedded_redis"], cwd=settings.BASE_DIR,
                            env=tree.env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 1 and "already answers" in second.stderr
    assert embedded_redis.is_up(str(tree.var / "redis.sock"))


def test_a_worker_killed_with_9_stops_the_whole_tree_with_a_message(state_dirs):
    with running_tree(Path(tempfile.mkdtemp(dir=state_dirs))) as tree:  # its own: the shared one lives on
        processes = tree.processes()
        _procfile_process(processes, "paddleweb worker").send_signal(signal.SIGKILL)
        _assert_the_tree_stops(tree, processes, "worker")


@pytest.mark.parametrize("name, needle", [("launcher", "-m launcher"), ("redis", "redis-server"), ("web", "uvicorn"),
                                          ("watcher", "watch_jobs")])
def test_any_other_part_killed_with_9_stops_the_whole_tree_too(state_dirs, name, needle):
    with running_tree(Path(tempfile.mkdtemp(dir=state_dirs))) as tree:
        processes = tree.processes()
        _procfile_process(processes, needle).send_signal(signal.SIGKILL)
        _assert_the_tree_stops(tree, processes, name)


JOB = r"""
import json, os, tempfile
home = os.environ["PADDLE_PFS_HOME"]
tried = {}
for name, path in json.load(open("service-files.json")).items():
    try:
        open(path, "rb").read(1)
        tried[name] = "read"
    except OSError as e:
        tried[name] = type(e).__name__
print(json.dumps(tried), flush=True)
print("uploaded:", open(os.path.join(home, "uploaded.txt")).read(), flush=True)
fd, path = tempfile.mkstemp(dir=home)  # 0600: its owner's alone
os.write(fd, b"written by the job")
os.close(fd)
os.rename(path, os.path.join(home, "private.txt"))
hidden = os.path.join(home, "hidden")
os.mkdir(hidden, 0o700)
with open(os.path.join(hidden, "inside.txt"), "w") as f:
    f.write("deep")
"""


def _client(tree: Tree):
    sys.path.insert(0, str(settings.BASE_DIR / "client"))
    from paddlectl.sdk import Client

    password = re.search(r"password: (\S+)", tree.output())[1]
    return Client(f"http://127.0.0.1:{tree.port}", username="admin", password=password)


def test_a_job_runs_sandboxed_to_succeeded_and_what_it_writes_is_its_users(tree, tmp_path):
    """As root the job runs as its user's job uid and the service as its account, which must still
    serve what the job wrote (a file only its owner may read included); rootless it all runs as
    this user. Either way the job reads what its user uploaded and none of the service's files."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "train.py").write_text(JOB)
    (package / "service-files.json").write_text(json.dumps(
        {"secret key": str(tree.var / "secret.key"), "database": str(tree.var / "db.sqlite3")}))
    client = _client(tree)
    home = client.home()
    (tmp_path / "uploaded.txt").write_text("from the user")
    client.storage.upload_file(tmp_path / "uploaded.txt", f"{home}/uploaded.txt")
    client.submit(package=package, job_name="sandboxed", entry_point="python train.py", mode="collective",
                  trainers=1, pservers=0)
    job = client.wait("sandboxed", timeout=240)
    logs = "".join(line.text for line in client.logs("sandboxed"))
    assert job["state"] == "Succeeded", (job, logs)
    assert '{"secret key": "FileNotFoundError", "database": "FileNotFoundError"}' in logs
    assert "uploaded: from the user" in logs
    for remote, text in (("private.txt", "written by the job"), ("hidden/inside.txt", "deep")):
        got = client.storage.download_file(f"{home}/{remote}", tmp_path / remote.replace("/", "-"))
        assert got.read_text() == text
    client.storage.rm(f"{home}/hidden", recursive=True)  # and the user may delete it


def _program(marker: str) -> list[psutil.Process]:
    """The job's own program, found by the argument only it was started with (its keeper's and
    sandbox's command lines end the same way)."""
    return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-2:] == ["train.py", marker]
            and os.path.basename(p.info["cmdline"][0]).startswith("python") and len(p.info["cmdline"]) == 3]


def test_a_running_job_keeps_running_across_a_restart_of_the_service(state_dirs, tmp_path):
    """Ctrl-C stops the service (the launcher with it); the job's keeper and sandbox are no part of
    its tree, so the job runs on, and the service started again follows it and can kill it."""
    var = Path(tempfile.mkdtemp(dir=state_dirs))
    marker = f"outlives-{os.getpid()}-{next(_trees)}"
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "train.py").write_text("import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.2)\n")
    try:
        with running_tree(var) as tree:
            client = _client(tree)
            client.submit(package=package, job_name="outlives", entry_point=f"python train.py {marker}",
                          mode="collective", trainers=1, pservers=0)
            client.wait("outlives", "Running", timeout=240)
            [program] = _wait(lambda: _program(marker), 60, "the job's program", tree)
            os.killpg(tree.proc.pid, signal.SIGINT)  # Ctrl-C reaches the service's process group
            assert tree.proc.wait(60) == 0, tree.output()[-4000:]
            assert program.is_running()
        with running_tree(var) as tree:
            client = _client(tree)
            assert client.get("outlives")["state"] == "Running"
            ticks = sum(line.text.startswith("tick") for line in client.logs("outlives"))
            _wait(lambda: sum(line.text.startswith("tick") for line in client.logs("outlives")) > ticks, 60,
                  "the job's log to go on", tree)
            assert program.is_running()
            client.kill("outlives")
            _wait(lambda: not _program(marker), 60, "the killed job's program to end", tree)
    finally:
        for p in _program(marker):
            with suppress(psutil.NoSuchProcess):
                p.kill()
