"""The local backend with small Python workloads: real processes, real signals, no mocks."""

import json
import os

import psutil
import pytest

from jobs import services
from jobs.backends.local.backend import LocalBackend
from jobs.lifecycle.sync import sync_job
from jobs.live import logstore
from jobs.models import Job, ReplicaState
from jobs.tasks import launch_job, reconcile
from pfs.paths import home
from tests.support import (
    DEEP,
    REACH_PSERVERS,
    deep_chain,
    job_processes,
    make_package,
    programs,
    run_until_done,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]


PS_WORKLOAD = """
import json, os, socket, sys, time
json.dump(dict(os.environ), open("env.json", "w"))
if os.environ["TRAINING_ROLE"] == "PSERVER":
    server = socket.create_server((os.environ["POD_IP"], int(os.environ["PADDLE_PORT"])))
    time.sleep(600)  # parameter servers never exit by themselves
""" + REACH_PSERVERS + """
print("trainer", os.environ["PADDLE_TRAINER_ID"], "starting", flush=True)
for step in range(3):
    print(f'PADDLECLOUD_METRIC {{"step": {step + 1}, "loss": {1 / (step + 1)}}}', flush=True)
sys.exit(int(os.environ.get("FAIL_TRAINER", "-1") == os.environ["PADDLE_TRAINER_ID"]) * 3)
"""


def submit(user, name, files, **fields):
    pkg = make_package(user, name, files)
    data = {"name": name, "package": pkg, "entry": "python train.py", "pservers": 2, "trainers": 2, **fields}
    return services.submit_job(user, data)


def replica_env(job, name):
    return json.loads((LocalBackend(job.datacenter).replica_dir(job.replicas.get(**_split(name))) / "work"
                       / "env.json").read_text())


def _split(name):
    role, index = name.split("-")
    return {"role": role, "index": int(index)}


def test_all_trainers_exiting_0_terminates_pservers_and_succeeds(alice):
    job = run_until_done(submit(alice, "ok", {"train.py": PS_WORKLOAD}))

    assert job.state == "Succeeded"
    states = {r.name: (r.state, r.exit_code) for r in job.replicas.all()}
    assert states["trainer-0"] == ("Succeeded", 0)
    assert states["trainer-1"] == ("Succeeded", 0)
    assert states["pserver-0"][0] == "Terminated"
    assert states["pserver-1"][0] == "Terminated"
    assert job_processes(job) == []
    reasons = list(job.events.filter(replica=None).values_list("state", flat=True))
    assert reasons == ["Queued", "Building", "Starting", "Running", "Succeeded"]


def test_every_replica_gets_the_process_contract(alice):
    job = run_until_done(submit(alice, "contract", {"train.py": PS_WORKLOAD}, passes=7, env={"MY_SETTING": "x y"}))
    pservers = [r.endpoint for r in job.replicas.filter(role="pserver")]
    trainers = [r.endpoint for r in job.replicas.filter(role="trainer")]

    ps0 = replica_env(job, "pserver-0")
    assert ps0["TRAINING_ROLE"] == "PSERVER"
    assert ps0["PADDLE_PSERVERS_IP_PORT_LIST"] == ",".join(pservers)
    assert f"{ps0['POD_IP']}:{ps0['PADDLE_PORT']}" == pservers[0]  # it binds its own list entry
    t1 = replica_env(job, "trainer-1")
    assert t1["TRAINING_ROLE"] == "TRAINER"
    assert t1["PADDLE_TRAINER_ID"] == t1["TRAINER_ID"] == t1["PADDLE_INIT_TRAINER_ID"] == "1"
    assert t1["PADDLE_TRAINERS_NUM"] == t1["TRAINERS"] == t1["PADDLE_INIT_NUM_GRADIENT_SERVERS"] == "2"
    assert t1["PADDLE_TRAINER_ENDPOINTS"] == ",".join(trainers)
    assert t1["PADDLE_WITH_GLOO"] == "0"
    assert t1["PADDLE_INIT_NUM_PASSES"] == "7"
    assert t1["PADDLE_JOB_NAME"] == "contract"
    assert t1["PADDLE_CLOUD_USERNAME"] == "alice"
    assert t1["PADDLE_CLOUD_CURRENT_DATACENTER"] == "local"
    assert t1["ENTRY"] == "python train.py"
    assert t1["MY_SETTING"] == "x y"
    assert t1["PADDLE_PFS_HOME"].endswith("/pfs/local/home/alice")
    checkpoints = t1["PADDLE_PFS_HOME"] + "/jobs/contract/checkpoints"
    assert t1["PADDLE_CHECKPOINT_DIR"] == ps0["PADDLE_CHECKPOINT_DIR"] == checkpoints
    assert "DATABASE_URL" not in t1 and "SECRET_KEY" not in t1  # nothing of the server leaks in
    work = LocalBackend(job.datacenter).replica_dir(job.replicas.get(role="trainer", index=1)) / "work"
    assert (work / "trainer_id").read_text() == "1\n"
    assert (work / "trainer_count").read_text() == "2\n"
    assert len({r.port for r in job.replicas.all()}) == 4


def test_a_job_named_as_seed_004_allows_runs_under_its_typed_name_with_a_dns_safe_host_name(alice):
    workload = ("import json, os, socket\n"
                "json.dump({**os.environ, 'HOST': socket.gethostname()}, open('env.json', 'w'))\n")
    job = run_until_done(submit(alice, "My.Job", {"train.py": workload}, mode="collective", pservers=0, trainers=1))
    assert job.state == "Succeeded", job.message
    env = replica_env(job, "trainer-0")
    assert env["PADDLE_JOB_NAME"] == "My.Job"
    if LocalBackend(job.datacenter).settings().sandboxed:  # the sandbox names its host after the job
        assert env["HOST"] == f"{job.k8s_name}-trainer-0"


def test_collective_mode_contract(alice):
    workload = "import json, os; json.dump(dict(os.environ), open('env.json', 'w'))\n"
    job = run_until_done(submit(alice, "coll", {"train.py": workload}, mode="collective", pservers=0, trainers=3))
    assert job.state == "Succeeded"
    trainers = [r.endpoint for r in job.replicas.order_by("index")]
    env = replica_env(job, "trainer-2")
    assert env["PADDLE_TRAINER_ID"] == "2"
    assert env["PADDLE_TRAINERS_NUM"] == "3"
    assert env["PADDLE_CURRENT_ENDPOINT"] == trainers[2]
    assert env["PADDLE_MASTER"] == trainers[0]
    assert env["PADDLE_DISTRI_BACKEND"] == "gloo"
    assert "TRAINING_ROLE" not in env


def test_a_failing_trainer_fails_the_job_with_its_exit_code_and_last_lines(alice):
    job = run_until_done(submit(alice, "bad", {"train.py": PS_WORKLOAD}, env={"FAIL_TRAINER": "1"}))

    assert job.state == "Failed"
    assert job.reason == "ReplicaFailed"
    assert "trainer-1 exited with code 3" in job.message
    assert "trainer 1 starting" in job.message  # the log tail
    failed = job.replicas.get(role="trainer", index=1)
    assert (failed.state, failed.exit_code) == ("Failed", 3)
    assert all(r.state != ReplicaState.RUNNING for r in job.replicas.all())
    assert job_processes(job) == []


def test_a_finished_replicas_state_never_changes_again(alice):
    """Once its host forgets the processes (its scratch wiped, a delete half done), every
    replica looks never started: the ones that ended keep how they ended."""
    import shutil

    job = run_until_done(submit(alice, "bad", {"train.py": PS_WORKLOAD}, env={"FAIL_TRAINER": "1"}))
    before = {r.name: (r.state, r.reason, r.exit_code) for r in job.replicas.all()}
    assert before["trainer-1"] == ("Failed", "Error", 3)
    shutil.rmtree(LocalBackend(job.datacenter).job_dir(job))
    sync_job(job)
    after = {r.name: (r.state, r.reason, r.exit_code) for r in job.replicas.all()}
    assert after == before


def test_a_missing_command_fails_the_job(alice):
    job = run_until_done(submit(alice, "nocmd", {"train.py": ""}, entry="no-such-program --x",
                                mode="collective", pservers=0, trainers=1))
    assert job.state == "Failed"
    assert "code 127" in job.message
    assert "cannot start 'no-such-program'" in job.message


def test_kill_stops_replicas_that_ignore_sigterm_after_the_grace_period(alice, settings):
    stubborn = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('running', flush=True)\ntime.sleep(600)\n")
    job = submit(alice, "stubborn", {"train.py": stubborn}, mode="collective", pservers=0, trainers=2)
    launch_job(job.pk)
    wait_for(lambda: all("running" in logstore.read(r).text for r in job.replicas.all()), 10, what="output")
    sync_job(job)
    assert Job.objects.get(pk=job.pk).state == "Running"

    assert services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)  # what the stop_job task does
    wait_for(lambda: not job_processes(job), settings.KILL_GRACE_SECONDS + 10, what="processes to go")
    sync_job(job)
    job.refresh_from_db()
    assert job.state == "Killed"
    assert [r.state for r in job.replicas.all()] == ["Terminated", "Terminated"]
    assert {r.exit_code for r in job.replicas.all()} == {137}  # SIGKILL after the grace period
    assert not services.kill_job(job)  # already ended: nothing to do


def _running_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if marker in " ".join(proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def test_grandchildren_are_killed_with_their_replica(alice):
    # Found by a marker in its command line: inside the sandbox's PID namespace its pid means nothing here.
    marker = f"escaped-grandchild-{os.getpid()}"
    workload = ("import subprocess, sys, time\n"
                f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}'],"
                " start_new_session=True)\n"
                "open('grandchild.started', 'w').write('yes')\n")
    job = run_until_done(submit(alice, "orphans", {"train.py": workload}, mode="collective", pservers=0, trainers=1))
    work = LocalBackend(job.datacenter).replica_dir(job.replicas.get()) / "work"
    assert (work / "grandchild.started").exists()
    assert job.state == "Succeeded"
    wait_for(lambda: not _running_with(marker), 5, what="the escaped grandchild to be killed")


def test_replicas_outlive_the_process_that_launched_them(alice):
    job = submit(alice, "detached", {"train.py": "import time; time.sleep(600)\n"}, mode="collective", pservers=0,
                 trainers=1)
    launch_job(job.pk)
    keeper = next(p for p in job_processes(job) if "keeper.py" in " ".join(p.cmdline()))
    assert keeper.ppid() != os.getpid()  # re-parented: a dying worker takes nothing with it
    services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)
    wait_for(lambda: not job_processes(job), 10, what="processes to go")


def test_launch_is_idempotent_and_reconcile_takes_over_a_stale_launch(alice, settings):
    settings.LAUNCH_LEASE_SECONDS = 0
    job = submit(alice, "twice", {"train.py": "import time; time.sleep(600)\n"}, mode="collective", pservers=0,
                 trainers=2)
    launch_job(job.pk)
    # Each replica's sandbox starts its processes one after the other: count once both programs run.
    wait_for(lambda: len(programs(job)) == 2, 10, what="both programs")
    first = sorted(p.pid for p in job_processes(job))
    # A launcher that died mid-way leaves Starting with a heartbeat nobody refreshes.
    Job.objects.filter(pk=job.pk).update(state="Starting", heartbeat="2000-01-01T00:00Z")
    launch_job(job.pk)
    launch_job(job.pk)
    assert sorted(p.pid for p in job_processes(job)) == first  # nothing started twice
    reconcile()  # runs sync for active jobs
    job.refresh_from_db()
    assert job.state == "Running"
    services.kill_job(job)
    LocalBackend(job.datacenter).stop(job)
    wait_for(lambda: not job_processes(job), 10, what="processes to go")


def test_a_job_timeout_fails_it(alice):
    job = submit(alice, "slow", {"train.py": "import time; time.sleep(600)\n"}, mode="collective", pservers=0,
                 trainers=1, timeout=1)
    launch_job(job.pk)

    def failed():
        sync_job(job)
        job.refresh_from_db()
        return job.state == "Failed"

    wait_for(failed, 15, what="the deadline")
    assert job.reason == "DeadlineExceeded"
    wait_for(lambda: not job_processes(job) or sync_job(job), 10, what="processes to go")


def test_requirements_make_a_runtime_built_once_and_reused(alice):
    from jobs.backends.local import runtime

    requirements = "six==1.17.0\n"
    files = {"train.py": "import six, sys; print(six.__version__, sys.prefix)\n", "requirements.txt": requirements}
    first = run_until_done(submit(alice, "req1", files, mode="collective", pservers=0, trainers=1), timeout=180)
    assert first.state == "Succeeded", first.message
    venv = runtime.env_dir(requirements)
    assert f"1.17.0 {venv}" in logstore.read(first.replicas.get()).text
    built = (venv / runtime.READY).stat().st_mtime_ns
    second = run_until_done(submit(alice, "req2", files, mode="collective", pservers=0, trainers=1))
    assert second.state == "Succeeded"
    assert (venv / runtime.READY).stat().st_mtime_ns == built  # reused, not rebuilt


def test_the_runtime_build_is_the_jobs_build_log_and_a_reuse_says_so(alice, alice_api):
    import shutil

    from jobs.backends.local import runtime

    # A requirement of this run's own (an always-true marker), so the runtime is built here.
    requirements = f'six==1.17.0 ; sys_platform != "plan9-{os.getpid()}"\n'
    files = {"train.py": "import six\n", "requirements.txt": requirements}
    try:
        first = run_until_done(submit(alice, "build1", files, mode="collective", pservers=0, trainers=1), timeout=180)
        assert first.state == "Succeeded", first.message
        built = alice_api.get("/api/v2/jobs/build1/logs/?replica=build").json()[0]["text"]
        assert "paddlecloud: building runtime" in built and "Successfully installed six-1.17.0" in built, built
        second = run_until_done(submit(alice, "build2", files, mode="collective", pservers=0, trainers=1))
        assert second.state == "Succeeded", second.message
        reused = alice_api.get("/api/v2/jobs/build2/logs/?replica=build").json()[0]["text"]
        assert "is ready (built before): nothing to install" in reused and "Successfully" not in reused, reused
    finally:
        shutil.rmtree(runtime.env_dir(requirements), ignore_errors=True)


def test_a_pip_failure_fails_the_job_with_pips_error(alice):
    files = {"train.py": "", "requirements.txt": "paddlecloud-no-such-pkg==0.0.1\n"}
    job = run_until_done(submit(alice, "badreq", files, mode="collective", pservers=0, trainers=1), timeout=120)
    assert job.state == "Failed"
    assert job.reason == "RuntimeEnvFailed"
    assert "paddlecloud-no-such-pkg" in job.message  # pip's own error tail
    assert job.replicas.get().state == "Terminated"


def test_a_failed_builds_message_reads_a_bounded_end_of_its_log(tmp_path, monkeypatch):
    # A package's setup script can make pip's log a sparse file of gigabytes with no newline.
    import subprocess
    import tracemalloc

    from jobs.backends.local import runtime

    class SparseFailingPip:
        returncode = 1

        def __init__(self, cmd, stdout, **kwargs):
            os.ftruncate(stdout.fileno(), 32 << 20)
            os.write(stdout.fileno(), b"\nERROR: No matching distribution found for numpy\n")

        def poll(self):
            return self.returncode

    monkeypatch.setattr(subprocess, "run", lambda cmd, **kwargs: os.makedirs(cmd[-1]))  # an empty "venv"
    monkeypatch.setattr(subprocess, "Popen", SparseFailingPip)
    log = tmp_path / "build.log"
    log.write_bytes(b"paddlecloud: building runtime\n")
    tracemalloc.start()
    try:
        with pytest.raises(runtime.RuntimeEnvError) as failed:
            runtime._build(tmp_path / "env", "numpy\n", lambda: None, False, log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    assert failed.value.log_tail.endswith("\nERROR: No matching distribution found for numpy")
    assert "paddlecloud" not in failed.value.log_tail


def test_delete_removes_processes_files_and_logs(alice):
    from jobs.tasks import delete_job_task

    job = submit(alice, "gone", {"train.py": "import time; print('x', flush=True); time.sleep(600)\n"},
                 mode="collective", pservers=0, trainers=1)
    launch_job(job.pk)
    replica = job.replicas.get()
    wait_for(lambda: logstore.size(replica) > 0, 10, what="output")
    services.delete_job(job)
    assert not services.visible_jobs(alice).exists()
    delete_job_task(job.pk)
    assert not Job.objects.filter(pk=job.pk).exists()
    assert job_processes(job) == []
    assert not LocalBackend(job.datacenter).job_dir(job).exists()
    assert not logstore.path(replica).exists()


def test_every_replica_gets_a_writable_checkpoint_dir_in_its_users_home(alice):
    workload = ("import os\n"
                "ckpt = os.environ['PADDLE_CHECKPOINT_DIR']\n"
                "with open(os.path.join(ckpt, 'trainer-' + os.environ['PADDLE_TRAINER_ID']), 'w') as f:\n"
                "    f.write(ckpt)\n")
    job = run_until_done(submit(alice, "ckpt", {"train.py": workload}, mode="collective", pservers=0, trainers=2))
    assert job.state == "Succeeded", job.message
    checkpoints = home(alice, "local").child("jobs", "ckpt", "checkpoints")
    written = {p.name: p.read_text() for p in checkpoints.disk.iterdir()}
    # The path as the job sees its home (the virtual one when sandboxed), the same for all.
    assert set(written) == {"trainer-0", "trainer-1"}
    assert written["trainer-0"] == written["trainer-1"]
    assert written["trainer-0"].endswith("/pfs/local/home/alice/jobs/ckpt/checkpoints")


def test_a_checkpoint_dir_that_cannot_be_made_fails_the_job_with_a_reason(alice):
    pkg = make_package(alice, "blocked", {"train.py": "print('never runs')\n"})
    # A file where the job's checkpoint directory should be.
    (home(alice, "local").child("jobs", "blocked").disk / "checkpoints").write_text("mine")
    job = run_until_done(services.submit_job(alice, {"name": "blocked", "package": pkg, "entry": "python train.py",
                                                     "mode": "collective", "pservers": 0, "trainers": 1}))
    assert job.state == "Failed"
    assert job.reason == "CheckpointDirUnavailable", job.message
    assert (home(alice, "local").child("jobs", "blocked").disk / "checkpoints").read_text() == "mine"


def test_checkpoints_in_the_package_directory_are_not_copied_into_the_working_copies(alice):
    workload = "import os\nprint(sorted(os.listdir('.')), sorted(os.listdir(os.environ['PADDLE_CHECKPOINT_DIR'])))\n"
    pkg = make_package(alice, "again", {"train.py": workload, "checkpoints/pass-000001/w": "saved",
                                        "data/checkpoints/keep": "a package's own file"})
    job = run_until_done(services.submit_job(alice, {"name": "again", "package": pkg, "entry": "python train.py",
                                                     "mode": "collective", "pservers": 0, "trainers": 1}))
    assert job.state == "Succeeded", job.message
    work = LocalBackend(job.datacenter).replica_dir(job.replicas.get()) / "work"
    assert not (work / "checkpoints").exists()
    assert (work / "data" / "checkpoints" / "keep").exists()  # only the job's own checkpoint directory is left out
    log = logstore.path(job.replicas.get()).read_text()
    assert "['data', 'train.py', 'trainer_count', 'trainer_id'] ['pass-000001']" in log, log


def _finished_replica(alice):
    """A job whose one replica has ended (its keeper's exit.json written), as observe() finds it."""
    pkg = make_package(alice, "fit", {"train.py": "print('hi')\n"})
    job = services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "pservers": 0, "trainers": 1})
    Job.objects.filter(pk=job.pk).update(state="Running")
    replica = job.replicas.get()
    state = LocalBackend(job.datacenter).state_dir(replica)
    state.mkdir(parents=True)
    (state / "keeper.pid").write_text("1")
    (state / "exit.json").write_text('{"exit_code": 0, "signal": 0, "terminated": false, "finished": 1}')
    return job, replica


@pytest.mark.timeout(120)
def test_a_finished_job_settles_though_its_home_holds_a_very_deep_tree(alice):
    """Its end shares the home back (the launcher's ownership.share): all of it, however deep."""
    job, replica = _finished_replica(alice)
    with deep_chain(home(alice, "local").disk / "deep", leaf=b"x") as top:
        statuses = LocalBackend(job.datacenter).observe(job)
        assert statuses[(replica.role, replica.index)].state == ReplicaState.SUCCEEDED
        if os.geteuid() == 0:  # a root launcher shares (a rootless one has no other uid to share with)
            fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
            for _ in range(DEEP):
                child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = child
            try:
                assert os.getxattr(f"/proc/self/fd/{fd}/leaf", "system.posix_acl_access")
            finally:
                os.close(fd)


def test_a_home_that_cannot_be_shared_back_keeps_no_job_from_settling(alice, monkeypatch):
    from jobs.backends.local import backend

    job, replica = _finished_replica(alice)
    real_ask = backend.ask

    def share_fails(op, **args):
        if op == "share":
            raise backend.LauncherError("refused")
        return real_ask(op, **args)

    monkeypatch.setattr(backend, "ask", share_fails)
    statuses = LocalBackend(job.datacenter).observe(job)
    assert statuses[(replica.role, replica.index)].state == ReplicaState.SUCCEEDED
