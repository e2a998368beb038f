"""The keeper (launcher/keeper.py, which runs keeper_main.py) on its own: what its start costs,
its command line, what the command it starts gets, and exit.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import keeper_main as keeper
from tests.support import wait_for

KEEPER = Path(keeper.__file__).with_name("keeper.py")


def test_its_start_imports_nothing_heavy():
    """Each replica's start is one of these interpreters starting: argparse, subprocess, json,
    shutil, signal, ctypes and what they pull in (re, enum, collections) cost it ~30 ms of CPU."""
    # Refused at once (no options): what the module itself imports, as `python -I -S` runs it.
    done = subprocess.run([sys.executable, "-X", "importtime", "-I", "-S", str(KEEPER)], capture_output=True,
                          text=True)
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "launcher.keeper_main" in loaded  # imported, so from __pycache__: a script is compiled at every start
    heavy = {"argparse", "subprocess", "json", "shutil", "signal", "ctypes", "re", "enum", "collections",
             "contextlib", "typing", "dataclasses", "functools"}
    assert not loaded & heavy


def test_the_command_line():
    opts = keeper.parse(["--label", "/s", "--state-fd", "3", "--log-fd", "4", "--cwd-fd", "5", "--grace", "2.5",
                         "--cgroup", "/a", "--cgroup", "/b", "--pass-fd", "7", "--pass-fd", "8", "--sandboxed",
                         "--disk-limit", "1024", "--disk-fd", "5", "--tmp-fd", "9", "--oom-file", "/a/memory.events",
                         "--require", "/bin/true", "--", "nsenter", "--net=/x", "bwrap"])
    assert (opts.label, opts.state_fd, opts.log_fd, opts.cwd_fd, opts.grace) == ("/s", 3, 4, 5, 2.5)
    assert (opts.cgroup, opts.pass_fd, opts.disk_fd, opts.tmp_fd) == (["/a", "/b"], [7, 8], [5], [9])
    assert (opts.sandboxed, opts.disk_limit, opts.oom_file, opts.require) == (True, 1024, "/a/memory.events",
                                                                              "/bin/true")
    assert opts.argv == ["nsenter", "--net=/x", "bwrap"]  # what follows -- is the command's, options or not
    plain = keeper.parse(["--label", "/s", "--state-fd", "3", "--log-fd", "4", "--cwd-fd", "5", "/bin/true", "-x"])
    assert (plain.argv, plain.sandboxed, plain.grace, plain.cgroup) == (["/bin/true", "-x"], False, 10.0, [])


@pytest.mark.parametrize(("argv", "error"), [
    (["--state-fd", "3", "--log-fd", "4", "--cwd-fd", "5", "--", "/bin/true"], "required: --label"),
    (["--label", "/s", "--state-fd", "x", "--log-fd", "4", "--cwd-fd", "5", "--", "/bin/true"], "not a int"),
    (["--label", "/s", "--state-fd", "3", "--log-fd", "4", "--cwd-fd", "5", "--unknown", "1", "--", "/bin/true"],
     "--unknown: unknown"),
    (["--label", "/s", "--state-fd", "3", "--log-fd", "4", "--cwd-fd", "5", "--"], "no command"),
    (["--label", "/s", "--state-fd", "3", "--log-fd", "4", "--cwd-fd"], "without its value"),
])
def test_a_wrong_command_line_is_refused_and_starts_nothing(argv, error, tmp_path):
    with pytest.raises(ValueError, match=error):
        keeper.parse(argv)
    done = subprocess.run([sys.executable, "-I", "-S", str(KEEPER), *argv], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 2 and error in done.stderr


def test_exit_json_is_json():
    result = {"exit_code": 137, "signal": 9, "terminated": True, "oom_killed": False, "disk_limit": False,
              "finished": 1795735860.832249}
    assert json.loads(keeper.to_json(result)) == result
    assert json.loads(keeper.to_json({"signal": None, "exit_code": 1})) == {"signal": None, "exit_code": 1}


def _keep(tmp_path: Path, *command: str, require: str | None = None) -> tuple[str, dict, int]:
    """Run `command` under a keeper as the service does without a sandbox, passing it one more
    descriptor; its log, exit.json and that descriptor's number."""
    (tmp_path / "state").mkdir()
    (tmp_path / "work").mkdir()
    fds = [os.open(tmp_path / "state", os.O_RDONLY | os.O_DIRECTORY),
           os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND),
           os.open(tmp_path / "work", os.O_RDONLY | os.O_DIRECTORY), os.open(tmp_path / "passed", os.O_CREAT)]
    try:
        subprocess.run([sys.executable, "-I", "-S", str(KEEPER), "--label", str(tmp_path), "--state-fd", str(fds[0]),
                        "--log-fd", str(fds[1]), "--cwd-fd", str(fds[2]), "--pass-fd", str(fds[3]),
                        *(["--require", require] if require else []), "--", *command],
                       stdin=subprocess.PIPE, pass_fds=fds, check=True)
    finally:
        for fd in fds:
            os.close(fd)
    assert (tmp_path / "state" / "keeper.pid").exists()  # before the starter's answer: the service waits for it
    wait_for(lambda: (tmp_path / "state" / "exit.json").exists(), 30, what="exit.json")
    return (tmp_path / "log").read_text(), json.loads((tmp_path / "state" / "exit.json").read_text()), fds[3]


PROBE = """import json, os, sys
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass  # listdir's own, closed by now
print(json.dumps({"session": os.getsid(0) == os.getpid(), "stdin": sys.stdin.read(), "cwd": os.getcwd(),
                  "fds": fds}), flush=True)
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


def test_the_command_gets_null_input_the_log_its_own_session_and_only_the_passed_descriptors(tmp_path):
    # The shell first (Python ignores SIGPIPE and SIGXFSZ itself), then Python in its place.
    log, result, passed = _keep(tmp_path, "/bin/sh", "-c", 'grep SigIgn /proc/$$/status; exec "$0" -I -S -c "$1"',
                                sys.executable, PROBE)
    ignored, first, second = log.splitlines()
    seen = json.loads(first)
    assert seen["session"] and seen["stdin"] == "" and seen["cwd"] == str(tmp_path / "work")
    assert seen["fds"] == {"0": "/dev/null", "1": str(tmp_path / "log"), "2": str(tmp_path / "log"),
                           str(passed): str(tmp_path / "passed")}
    # The keeper (Python) ignores SIGPIPE and SIGXFSZ: the command must not inherit that (a file
    # at the disk limit stops a program that does not handle SIGXFSZ). What its own starter
    # ignores is the starter's choice (under the full suite a worker ignored signal 32).
    sigpipe_sigxfsz = 1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)
    assert ignored.startswith("SigIgn:") and int(ignored.split()[1], 16) & sigpipe_sigxfsz == 0, ignored
    assert second == "to stderr"
    assert result["exit_code"] == 3 and result["signal"] is None and not result["terminated"]


def test_a_command_that_cannot_be_executed_is_logged_and_ends_with_127(tmp_path):
    program = tmp_path / "not-executable"
    program.write_text("#!/bin/sh\n")
    log, result, _ = _keep(tmp_path, str(program), require=str(program))
    assert f"paddlecloud: cannot start {str(program)!r}" in log and "Permission denied" in log
    assert result["exit_code"] == 127


def test_a_keeper_that_fails_before_writing_its_pid_fails_its_starter(tmp_path):
    state = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    try:  # the log as its working directory: fchdir fails
        done = subprocess.run([sys.executable, "-I", "-S", str(KEEPER), "--label", str(tmp_path), "--state-fd",
                               str(state), "--log-fd", str(log), "--cwd-fd", str(log), "--", "/bin/true"],
                              pass_fds=[state, log])
    finally:
        os.close(state)
        os.close(log)
    assert done.returncode == 1
    assert not (tmp_path / "keeper.pid").exists()
