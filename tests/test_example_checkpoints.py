"""examples/fit_a_line's checkpoints and start barrier, with real PaddlePaddle processes run by
hand as the README shows (2 pservers, 2 trainers on loopback), in the runtime virtualenv a job
of the example gets. The job-level test (kill -9 a trainer, the job restarts and succeeds) is in
test_e2e_paddle.py."""

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from jobs.backends.local import runtime
from tests.support import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fit_a_line"
DEADLINE = 600  # seconds for anything a run waits on; a busy 2-core machine is slow


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Cluster:
    """The example's processes, every output line kept with the moment it arrived."""

    def __init__(self, work: Path, checkpoints: Path, passes: int):
        self.work, self.lines, self.procs = work, [], {}
        shutil.copytree(EXAMPLE, work, dirs_exist_ok=True)
        bin_dir = runtime.ensure_env((EXAMPLE / "requirements.txt").read_text(), sandboxed=False)
        ps, tr = _free_ports(2), _free_ports(2)
        self.env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "HOME": str(work),
            "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(f"127.0.0.1:{p}" for p in ps),
            "PADDLE_TRAINER_ENDPOINTS": ",".join(f"127.0.0.1:{p}" for p in tr),
            "PADDLE_TRAINERS_NUM": "2", "POD_IP": "127.0.0.1", "PADDLE_WITH_GLOO": "0",
            "PADDLE_INIT_NUM_PASSES": str(passes), "PADDLE_CHECKPOINT_DIR": str(checkpoints),
        }
        self.ports = {"pserver-0": ps[0], "pserver-1": ps[1], "trainer-0": tr[0], "trainer-1": tr[1]}

    def start(self, name):
        role, index = name.split("-")
        env = {**self.env, "TRAINING_ROLE": role.upper(), "PADDLE_PORT": str(self.ports[name])}
        if role == "trainer":
            env["PADDLE_TRAINER_ID"] = index
        proc = subprocess.Popen(["python", "train.py"], cwd=self.work, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs[name] = proc
        threading.Thread(target=self._read, args=(name, proc), daemon=True).start()

    def _read(self, name, proc):
        for line in proc.stdout:
            self.lines.append((time.monotonic(), name, line.rstrip("\n")))

    def output(self, name=None):
        return "\n".join(f"{who}: {line}" for _, who, line in self.lines if name in (None, who))

    def saw(self, name, text):
        return any(who == name and text in line for _, who, line in self.lines)

    def losses(self):
        """(arrival, trainer, pass, loss) of every "trainer N pass P loss L" line, in arrival order."""
        found = []
        for at, who, line in self.lines:
            words = line.split()
            if who.startswith("trainer") and words[:1] == ["trainer"] and words[2:3] == ["pass"]:
                found.append((at, who, int(words[3]), float(words[5])))
        return found

    def finish_trainers(self):
        for name in ("trainer-0", "trainer-1"):
            proc = self.procs[name]
            try:
                proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name} did not finish:\n{self.output()}")
            assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{self.output(name)}"

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(run, passes, checkpoints=tmp_path / "checkpoints"):
        made.append(Cluster(tmp_path / run, checkpoints, passes))
        return made[-1]

    yield make
    for c in made:
        c.stop()


def run_all(c):
    for name in ("pserver-0", "pserver-1", "trainer-0", "trainer-1"):
        c.start(name)
    c.finish_trainers()
    c.stop()  # pservers never exit by themselves
    return c


def test_a_second_run_resumes_from_the_first_runs_last_checkpoint(cluster, tmp_path):
    first = run_all(cluster("first", passes=4))
    checkpoints = tmp_path / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("pass-*")) == ["pass-000003", "pass-000004"]  # the last 2 kept
    assert not list(checkpoints.glob(".tmp-*"))
    before = {who: loss for _, who, step, loss in first.losses() if step == 4}

    second = run_all(cluster("second", passes=7))
    assert second.saw("trainer-0", "trainer 0 set the parameters of checkpoint pass 4"), second.output("trainer-0")
    after = second.losses()
    assert {(who, step) for _, who, step, _ in after} == {(t, s) for t in ("trainer-0", "trainer-1") for s in (5, 6, 7)}
    first_losses = [loss for _, _, step, loss in first.losses() if step == 1]
    for who in ("trainer-0", "trainer-1"):
        resumed = next(loss for _, w, step, loss in after if w == who and step == 5)
        # Continues where the first run stopped, nowhere near an untrained model's loss.
        assert resumed < 2 * max(before.values()) + 1, (before, after)
        assert resumed < max(first_losses) / 4, (first_losses, after)
    assert (checkpoints / "trainer-0.progress").read_text() == "7\n"
    assert (checkpoints / "trainer-1.progress").read_text() == "7\n"


def test_a_late_trainer_0_does_not_throw_away_what_trainer_1_learned(cluster):
    c = cluster("late", passes=25)
    for name in ("pserver-0", "pserver-1", "trainer-1"):
        c.start(name)
    # Trainer 0 starts only once trainer 1 is either training or waiting for it.
    wait_for(lambda: c.saw("trainer-1", "trainer 1 pass 3") or c.saw("trainer-1", "waiting for trainer 0"),
             DEADLINE, what=lambda: f"trainer 1 to train or wait:\n{c.output()}")
    c.start("trainer-0")
    c.finish_trainers()
    losses = c.losses()
    assert len(losses) == 50, c.output()
    # Without the barrier trainer 0's initial push threw trainer 1 back (3.85, then 629).
    no_jump_back(losses)
    assert losses[-1][3] < 8, losses


def no_jump_back(losses):
    """The pservers' parameters are never reset: no loss jumps far above one already reached."""
    best = float("inf")
    for _, who, step, loss in losses:
        assert loss < 3 * best + 1, f"{who} pass {step}: loss {loss} after {best} was reached:\n{losses}"
        best = min(best, loss)


@pytest.mark.parametrize("victim", ["trainer-0", "trainer-1"])
def test_a_trainer_killed_mid_run_and_started_again_continues_from_its_last_pass(cluster, tmp_path, victim):
    c = cluster("kill", passes=30)
    for name in ("pserver-0", "pserver-1", "trainer-0", "trainer-1"):
        c.start(name)
    number = victim.split("-")[1]
    wait_for(lambda: c.saw(victim, f"trainer {number} pass 3 ") and list((tmp_path / "checkpoints").glob("pass-*")),
             DEADLINE, what=lambda: f"{victim}'s pass 3 and a checkpoint:\n{c.output()}")
    c.procs[victim].kill()  # SIGKILL: no chance to save anything more
    c.procs[victim].wait()
    killed_at = time.monotonic()
    before = [(step, loss) for at, who, step, loss in c.losses() if who == victim]
    c.start(victim)
    c.finish_trainers()

    after = [(step, loss) for at, who, step, loss in c.losses() if who == victim and at > killed_at]
    # It resumes after the last pass it recorded: the one it printed last, or the one before when
    # the kill came between the print and the record.
    assert before[-1][0] <= after[0][0] <= before[-1][0] + 1, f"resumed at {after[0]} after {before}"
    assert [step for step, _ in after] == list(range(after[0][0], 31))
    assert after[0][1] < 2 * before[-1][1] + 1, f"the loss started over: {before} then {after}"
    assert after[0][1] < before[0][1] / 4 or before[0][1] < 20, (before, after)
    # The pservers kept running, so a trainer 0 started again pulls their parameters and pushes none.
    assert not c.saw(victim, "set the parameters of checkpoint"), c.output(victim)
    no_jump_back(c.losses())


def test_a_save_killed_half_way_is_never_resumed_from(tmp_path):
    """The atomic write by itself (no Paddle): a .tmp- directory left by a kill is ignored and
    removed; the same pass saved again replaces the older copy whole."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("checkpoint", EXAMPLE / "checkpoint.py")
    checkpoint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checkpoint)

    root = str(tmp_path)
    checkpoint.save_pass(root, 1, lambda d: Path(d, "w").write_text("one"))
    half = tmp_path / ".tmp-pass-000002-99999"
    half.mkdir()
    (half / "w").write_text("half")  # killed before meta.json and the rename
    assert checkpoint.latest(root) == (1, os.path.join(root, "pass-000001"))
    checkpoint.remove_partial(root)
    assert not half.exists()
    checkpoint.save_pass(root, 1, lambda d: Path(d, "w").write_text("one again"))
    assert (tmp_path / "pass-000001" / "w").read_text() == "one again"
    for step in (2, 3):
        checkpoint.save_pass(root, step, lambda d: Path(d, "w").write_text("x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pass-000002", "pass-000003"]
    checkpoint.save_progress(root, 1, 3)
    assert checkpoint.progress(root, 1) == 3 and checkpoint.progress(root, 0) == 0
