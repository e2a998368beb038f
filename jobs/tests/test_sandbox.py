"""The local sandbox, tried as a hostile user would: real jobs of alice in real bubblewrap sandboxes,
real network namespaces and cgroups, against the service's real files and sockets. Every test runs
in the mode this run has: as root (the root launcher, job uids) or as a normal user (rootless)."""

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from django.db import connection

from accounts.models import Datacenter
from jobs import services
from jobs.backends.local import sandbox
from jobs.backends.local.backend import LocalBackend
from jobs.live import logstore
from jobs.tasks import launch_job
from jobs.tests.test_local_backend import run_until_done, submit
from launcher import netns
from tests.support import ROOT, LauncherProcess, job_processes, programs, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]

PROBE = r"""
import json, os, socket

checks = json.load(open("checks.json"))
result = {}


def attempt(name, action):
    try:
        action()
        result[name] = "ok"
    except Exception as e:
        result[name] = f"{type(e).__name__}: {e}"


def unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(3)
    s.connect(path)
    s.close()


for name, path in checks["read"].items():
    attempt("read " + name, lambda p=path: open(p, "rb").read(1))
for name, path in checks["write"].items():
    attempt("write " + name, lambda p=path: open(p, "w").write("x"))
for name, path in checks["link"].items():
    attempt("link " + name, lambda p=path: os.link(p, os.path.join(os.environ["PADDLE_PFS_HOME"], "stolen")))
for name, (host, port) in checks["tcp"].items():
    attempt("tcp " + name, lambda a=(host, port): socket.create_connection(a, timeout=3).close())
for name, path in checks["unix"].items():
    attempt("unix " + name, lambda p=path: unix(p))
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
result["uid"] = os.getuid()
result["status"] = {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs")}
result["env"] = sorted(os.environ)
result["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
home = os.environ["PADDLE_PFS_HOME"]
with open(os.path.join(home, "written-by-job.txt"), "w") as f:
    f.write("hello")
with open("probe.json", "w") as f:
    json.dump(result, f)
"""


def tcp_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def set_config(**config):
    Datacenter.objects.filter(name="local").update(config=config)


def work_dir(job, name="trainer-0") -> Path:
    role, index = name.split("-")
    return LocalBackend(job.datacenter).replica_dir(job.replicas.get(role=role, index=int(index))) / "work"


def test_a_job_reaches_none_of_the_services_files_sockets_or_other_users_data(alice, bob, settings):
    from pfs.paths import home

    secret = settings.VAR_DIR / "secret.key"
    # SQLite: the database file; PostgreSQL: its unix socket (the TCP port is checked below).
    database = {"database": connection.settings_dict["NAME"]} if connection.vendor == "sqlite" else {}
    unix = {"bundled redis": settings.EMBEDDED_REDIS_SOCKET} if settings.EMBEDDED_REDIS_SOCKET else {}
    if connection.vendor == "postgresql":
        unix["postgresql"] = "/var/run/postgresql/.s.PGSQL.5432"
    bob_home = home(bob, "local").disk
    bob_home.mkdir(parents=True)
    (bob_home / "private.txt").write_text("bob's")
    public = settings.PFS_ROOT / "local" / "public"
    public.mkdir(parents=True)
    (public / "data.txt").write_text("shared")
    other_log = settings.LOGS_ROOT / "other-job" / "trainer-0.log"
    other_log.parent.mkdir(parents=True)
    other_log.write_text("another job's output")
    # Everything the job is to be refused is really there and open to the service itself. The
    # database is not opened here: closing any other descriptor of it would drop the locks this
    # process's SQLite connections hold, and another process could then checkpoint and delete the
    # write-ahead log under them (https://sqlite.org/howtocorrupt.html, 2.2).
    for path in (secret, bob_home / "private.txt", other_log, f"/proc/{os.getpid()}/environ"):
        assert Path(path).read_bytes()
    for path in database.values():
        assert os.access(path, os.R_OK) and os.stat(path).st_size
    tcp = {"redis": ["127.0.0.1", 6379], "postgresql": ["127.0.0.1", 5432]}
    for path in unix.values():
        socket.socket(socket.AF_UNIX).connect(path)
    open_here = {name for name, (_, port) in tcp.items() if tcp_open(port)}
    checks = {
        "read": {"secret key": str(secret), **database, "bob's home": "/pfs/local/home/bob/private.txt",
                 "bob's home on disk": str(bob_home / "private.txt"), "service environ": f"/proc/{os.getpid()}/environ",
                 "another job's log": str(other_log), "public": "/pfs/local/public/data.txt"},
        "write": {"/usr": "/usr/pwned", "/etc": "/etc/pwned", "/": "/pwned", "public": "/pfs/local/public/pwned",
                  "bob's home": "/pfs/local/home/bob/pwned", "jobs root": str(settings.JOBS_ROOT / "pwned"),
                  "state dir": str(settings.VAR_DIR / "pwned")},
        "link": {"secret key": str(secret)},
        "tcp": tcp,
        "unix": unix,
    }
    job = run_until_done(submit(alice, "probe", {"train.py": PROBE, "checks.json": json.dumps(checks)},
                                mode="collective", pservers=0, trainers=1, env={"MY_SETTING": "1"}))
    assert job.state == "Succeeded", job.message
    result = json.loads((work_dir(job) / "probe.json").read_text())

    assert result["read public"] == "ok"
    refused = {k: v for k, v in result.items() if k.split(" ")[0] in ("read", "write", "link", "tcp", "unix")
               and k != "read public"}
    # This run's state lies below /tmp, which in the sandbox is the replica's own /tmp: rootless, the
    # job may make files at those paths there, none of which reach the host's (checked below).
    for name in ("jobs root", "state dir"):
        if not ROOT and checks["write"][name].startswith("/tmp/") and refused[f"write {name}"] == "ok":
            del refused[f"write {name}"]
    assert all(v != "ok" for v in refused.values()), {k: v for k, v in refused.items() if v == "ok"}
    assert open_here, "neither Redis nor PostgreSQL listens here: the TCP checks prove nothing"
    assert "ConnectionRefusedError" in result["tcp redis"]
    for name in ("/usr", "/etc", "/", "jobs root", "state dir"):
        assert not (Path(checks["write"][name]).exists()), name
    assert not (public / "pwned").exists() and not (bob_home / "pwned").exists()
    # No privileges: its own uid (rootless: a uid of its own user namespace), no capabilities at
    # all, no way to gain any.
    assert result["uid"] == (sandbox.job_uid(alice) if ROOT else 1000)
    assert result["status"] == {"CapEff": "0" * 16, "CapPrm": "0" * 16, "CapBnd": "0" * 16, "NoNewPrivs": "1"}
    # Its environment is the process contract's (plus the user's own), nothing of the service's.
    assert "MY_SETTING" in result["env"] and "PADDLE_TRAINER_ID" in result["env"]
    assert not set(result["env"]) & {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    assert os.getpid() not in result["pids"] and max(result["pids"]) < 10  # its own PID namespace
    # And it still writes its own home, as its own uid (rootless: the service's, on the host).
    written = home(alice, "local").disk / "written-by-job.txt"
    assert written.read_text() == "hello"
    assert written.stat().st_uid == (sandbox.job_uid(alice) if ROOT else os.getuid())


SERVER = r"""
import os, socket, sys, time
port = int(os.environ["PADDLE_PORT"])
if os.environ["TRAINING_ROLE"] == "PSERVER":
    s = socket.create_server(("127.0.0.1", port))
    print("listening", flush=True)
    while True:
        conn, _ = s.accept()
        conn.sendall(b"hello from " + os.environ["PADDLE_JOB_NAME"].encode())
        conn.close()
host, port = os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")[0].split(":")
deadline = time.monotonic() + 20
while True:
    try:
        print(socket.create_connection((host, int(port)), timeout=3).recv(100).decode(), flush=True)
        break
    except OSError as e:
        if time.monotonic() > deadline:
            print("cannot reach the pserver:", e, flush=True)
            sys.exit(4)
        time.sleep(0.1)
time.sleep(600)
"""

INTRUDER = r"""
import os, socket
try:
    print(socket.create_connection(("127.0.0.1", int(os.environ["TARGET_PORT"])), timeout=3).recv(100), flush=True)
except OSError as e:
    print("refused:", type(e).__name__, flush=True)
"""


def test_replicas_of_a_job_reach_each_other_but_no_other_job_or_the_host_reaches_them(alice, bob):
    job = submit(alice, "pair", {"train.py": SERVER}, pservers=1, trainers=1)
    launch_job(job.pk)
    trainer = job.replicas.get(role="trainer")
    wait_for(lambda: "hello from pair" in logstore.read(trainer).text, 30, what="the trainer to reach its pserver")
    port = job.replicas.get(role="pserver").port

    intruder = run_until_done(submit(bob, "intruder", {"train.py": INTRUDER}, mode="collective", pservers=0,
                                     trainers=1, env={"TARGET_PORT": str(port)}))
    assert "refused: ConnectionRefusedError" in logstore.read(intruder.replicas.get()).text
    assert not tcp_open(port)  # nor from the host: the port is in the job's own namespace

    services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)
    wait_for(lambda: not job_processes(job), 20, what="processes to go")


FORK_BOMB = r"""
import os, sys, time
n = 0
try:
    while True:
        if os.fork() == 0:
            while True:  # every child forks on, as a real bomb does
                try:
                    os.fork()
                except OSError:
                    time.sleep(0.01)
        n += 1
except OSError as e:
    print(f"fork refused after {n} children: {e}", flush=True)
    sys.exit(3)
"""


def needs_limit(name: str) -> None:
    """Skip where the launcher cannot enforce the cgroup limit `name` (it says so, never silently:
    see test_isolation_warnings.py) — rootless on a machine that delegates no cgroup to the user."""
    found = sandbox.status()
    if name not in found.enforced:
        pytest.skip(f"{name} is not enforced here: {found.missing.get(name)}")


def job_ns(launcher_service, job) -> str:
    return netns.name(str(launcher_service.roots["jobs"]), str(job.pk))


def test_a_fork_bomb_stops_at_the_pids_limit_and_everything_of_it_is_killed(alice):
    needs_limit("pids")
    set_config(pids_limit=64)
    job = run_until_done(submit(alice, "bomb", {"train.py": FORK_BOMB}, mode="collective", pservers=0, trainers=1),
                         timeout=60)
    replica = job.replicas.get()
    assert (replica.state, replica.exit_code) == ("Failed", 3)
    assert "fork refused after" in logstore.read(replica).text
    assert job_processes(job) == []
    assert subprocess.run(["true"]).returncode == 0  # the server still forks


MEMORY_HOG = r"""
blocks = []
for i in range(64):
    blocks.append(b"x" * (16 << 20))
    print("allocated", (i + 1) * 16, "MiB", flush=True)
"""


def test_a_replica_over_its_memory_is_oom_killed(alice):
    needs_limit("memory")
    job = run_until_done(submit(alice, "hog", {"train.py": MEMORY_HOG}, mode="collective", pservers=0, trainers=1,
                                memory="64Mi"))
    replica = job.replicas.get()
    assert job.state == "Failed"
    assert (replica.state, replica.reason, replica.exit_code) == ("Failed", "OOMKilled", 137)
    assert "allocated 1024 MiB" not in logstore.read(replica).text


def test_the_jobs_network_namespace_and_cgroups_are_gone_when_it_ends(alice, launcher_service):
    from launcher import cgroups

    job = submit(alice, "tidy", {"train.py": "import time; time.sleep(600)\n"}, mode="collective", pservers=0,
                 trainers=2)
    launch_job(job.pk)
    ns = job_ns(launcher_service, job)
    # As root a named namespace; rootless, the process that holds it.
    held = netns.NETNS_DIR / ns if ROOT else launcher_service.state / "netns" / f"{ns}.pid"
    assert held.exists()
    names = [f"{ns}-{r.name}" for r in job.replicas.all()]
    # The launcher is a child of this process, in the same cgroups: its replicas' are below them.
    parents = set(cgroups.support().parents.values()) if sandbox.status().enforced else set()
    assert all((p / n).is_dir() for p in parents for n in names)

    services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)
    wait_for(lambda: not job_processes(job), 20, what="processes to go")
    LocalBackend(job.datacenter).observe(job)  # what the watcher does next
    assert not held.exists()
    assert not any((p / n).exists() for p in parents for n in names)


@pytest.fixture
def launcher_without_bwrap(tmp_path, settings, launcher_service):
    """A launcher on a machine with everything but bubblewrap, for this test's requests."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("nsenter", "ip", "setpriv", "unshare", "slirp4netns"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    bare = LauncherProcess(tmp_path / "bare", launcher_service.roots, env={"PATH": str(bin_dir)}).ready()
    settings.LAUNCHER_SOCKET, settings.JOB_UIDS = bare.sock, bare.job_uids
    yield bare
    settings.LAUNCHER_SOCKET, settings.JOB_UIDS = launcher_service.sock, launcher_service.job_uids
    bare.stop()


def test_without_bwrap_jobs_fail_closed_with_sandbox_unavailable(alice, launcher_without_bwrap):
    job = run_until_done(submit(alice, "open", {"train.py": "print('ran', flush=True)\n"}, mode="collective",
                                pservers=0, trainers=1))
    assert (job.state, job.reason) == ("Failed", "SandboxUnavailable")
    assert "apt-get install bubblewrap" in job.message
    assert logstore.read(job.replicas.get()).text == ""  # nothing ran


def test_without_the_launcher_jobs_fail_closed_with_sandbox_unavailable(alice, tmp_path, settings, launcher_service):
    settings.LAUNCHER_SOCKET = tmp_path / "nobody-listens.sock"
    job = submit(alice, "alone", {"train.py": "print('ran', flush=True)\n"}, mode="collective", pservers=0, trainers=1)
    launch_job(job.pk)
    job.refresh_from_db()
    settings.LAUNCHER_SOCKET = launcher_service.sock
    assert (job.state, job.reason) == ("Failed", "SandboxUnavailable")
    assert "the launcher is not running" in job.message


def test_isolation_none_is_an_explicit_opt_out_that_runs_jobs_unsandboxed(alice, settings):
    set_config(isolation="none")
    probe = "import os; print('uid', os.getuid(), open(os.environ['SECRET']).read() != '', flush=True)\n"
    job = run_until_done(submit(alice, "trusted", {"train.py": probe}, mode="collective", pservers=0, trainers=1,
                                env={"SECRET": str(settings.VAR_DIR / "secret.key")}))
    assert job.state == "Succeeded", job.message
    assert f"uid {os.getuid()} True" in logstore.read(job.replicas.get()).text


def test_a_bad_local_setting_fails_the_job_with_the_key_named(alice):
    set_config(isolation="off")
    job = run_until_done(submit(alice, "badcfg", {"train.py": ""}, mode="collective", pservers=0, trainers=1))
    assert (job.state, job.reason) == ("Failed", "BadDatacenterConfig")
    assert "isolation: must be one of sandbox, none" in job.message


def _oom_score_adj_settable() -> bool:
    """Some machines (this one's sandboxed kernel among them) refuse any change with an I/O error."""
    done = subprocess.run(["sh", "-c", "echo -1000 > /proc/self/oom_score_adj && cat /proc/self/oom_score_adj"],
                          capture_output=True, text=True)
    return done.stdout.strip() == "-1000"


def _memory_cgroup(pid: int) -> str:
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return next(line.split(":", 2)[2] for line in lines if line.split(":")[1] in ("memory", ""))


def test_the_program_runs_as_the_job_uid_in_its_cgroup_while_its_keeper_stays_outside(alice, launcher_service):
    job = submit(alice, "keeper", {"train.py": "import time; time.sleep(600)\n"}, mode="collective", pservers=0,
                 trainers=1)
    launch_job(job.pk)
    keeper = next(p for p in job_processes(job) if "keeper.py" in " ".join(p.cmdline()))
    program = wait_for(lambda: programs(job), 30, what="the program")[0]
    # As root its user's job uid; rootless the service's own, in a user namespace of its own.
    assert program.uids().real == (sandbox.job_uid(alice) if ROOT else os.getuid())
    assert Path(f"/proc/{program.pid}/ns/user").stat().st_ino != Path("/proc/self/ns/user").stat().st_ino or ROOT
    if "memory" in sandbox.status().enforced:
        assert _memory_cgroup(program.pid).endswith(f"/{job_ns(launcher_service, job)}-trainer-0")
        # A replica at its limit cannot take its keeper down.
        assert _memory_cgroup(keeper.pid) == _memory_cgroup(launcher_service.proc.pid)
    if _oom_score_adj_settable() and ROOT:
        assert Path(f"/proc/{keeper.pid}/oom_score_adj").read_text().strip() == "-1000"
        assert Path(f"/proc/{program.pid}/oom_score_adj").read_text().strip() == "0"
    services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)
    wait_for(lambda: not job_processes(job), 20, what="processes to go")


@pytest.fixture
def admin_client(client, django_user_model, datacenter):
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "password"))
    return client


def test_the_datacenter_admin_page_says_what_isolation_and_which_limits_are_enforced(admin_client, datacenter):
    page = admin_client.get(f"/admin/accounts/datacenter/{datacenter.pk}/change/").content.decode()
    assert "Sandbox enforced (bubblewrap)" in page
    assert ("as its user" if ROOT else "(rootless: user namespaces alone keep it from the service") in page
    found = sandbox.status()
    names = {"memory": "memory", "cpu": "CPU", "pids": "pids (at most 1024 per replica)"}
    for limit in found.enforced:
        assert f"Limit enforced: {names[limit]}" in page
    for limit, why in found.missing.items():
        assert f"Limit NOT enforced: {limit}: {why}" in page
    assert len(found.enforced) + len(found.missing) == 3
    set_config(isolation="none")
    page = admin_client.get(f"/admin/accounts/datacenter/{datacenter.pk}/change/").content.decode()
    assert "Sandbox OFF (isolation: none)" in page


def test_the_admin_page_shows_an_unavailable_sandbox_and_refuses_bad_local_settings(admin_client, datacenter,
                                                                                     launcher_without_bwrap):
    page = admin_client.get(f"/admin/accounts/datacenter/{datacenter.pk}/change/").content.decode()
    assert "Sandbox UNAVAILABLE" in page and "apt-get install bubblewrap" in page
    res = admin_client.post(f"/admin/accounts/datacenter/{datacenter.pk}/change/", {
        "name": "local", "backend": "local", "description": "", "config": '{"pids_limit": 5}', "kubeconfig": ""})
    assert res.status_code == 200
    assert "pids_limit: must be a whole number from 16 to 4194304" in res.content.decode()


@pytest.mark.skipif(not ROOT, reason="rootless, a job runs under the service's uid: whatever is in its home is "
                                     "its own to read (docs/operating/security.md says so)")
def test_a_hard_link_planted_in_a_home_does_not_hand_over_the_file_it_names(alice, tmp_path):
    from pfs.paths import home

    outside = tmp_path / "service-file"  # on the same filesystem as the homes, as var/ is in production
    outside.write_text("the service's")
    outside.chmod(0o600)
    alice_home = home(alice, "local").disk
    alice_home.mkdir(parents=True)
    os.link(outside, alice_home / "planted")  # as a job with isolation "none" could have done
    probe = "import os\ntry:\n    open(os.environ['PADDLE_PFS_HOME'] + '/planted').read()\n    print('read it')\n" \
            "except OSError as e:\n    print('refused', type(e).__name__, flush=True)\n"
    job = run_until_done(submit(alice, "planted", {"train.py": probe}, mode="collective", pservers=0, trainers=1))
    assert "refused PermissionError" in logstore.read(job.replicas.get()).text
    assert outside.stat().st_uid == 0 and outside.stat().st_mode & 0o777 == 0o600


def test_a_package_linking_trainer_id_elsewhere_does_not_make_the_service_write_there(alice, tmp_path):
    from pfs.paths import home

    target = tmp_path / "service-file"
    target.write_text("intact")
    package = home(alice, "local").child("jobs", "linky").disk
    package.mkdir(parents=True)
    (package / "train.py").write_text("print(open('trainer_id').read().strip(), flush=True)\n")
    os.symlink(target, package / "trainer_id")
    job = services.submit_job(alice, {"name": "linky", "package": "/pfs/local/home/alice/jobs/linky",
                                      "entry": "python train.py", "mode": "collective", "trainers": 1})
    job = run_until_done(job)
    assert job.state == "Succeeded", job.message
    assert target.read_text() == "intact"
    assert logstore.read(job.replicas.get()).text.strip() == "0"


def test_a_package_whose_directory_is_private_still_runs(alice):
    from pfs.paths import home

    job = submit(alice, "private", {"train.py": "print('ran')"}, mode="collective", pservers=0, trainers=1)
    os.chmod(home(alice, "local").child("jobs", "private").disk, 0o700)  # as an upload may leave it
    job = run_until_done(job)
    assert job.state == "Succeeded", job.message
    assert "ran" in logstore.tail(job.replicas.get(), 10).text
