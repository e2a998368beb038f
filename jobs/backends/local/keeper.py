"""Keeper of one local replica process (run as a plain script, no Django).

Like a container runtime's monitor: it detaches from whoever launched it, so the replica and
its exit code outlive a restarted Celery worker or web server. It runs the command in its own
process group with stdout+stderr appended to the log file, becomes a subreaper so daemonised
grandchildren cannot escape, and on SIGTERM stops the group: SIGTERM, then SIGKILL after the
grace period. When the command ends it kills whatever is left of the group, its descendants
and its cgroups, and writes `exit.json` atomically in the state directory.

The command joins the replica's cgroups (`--cgroup`, made by the backend with its limits) just
before it executes; the keeper stays outside them and asks the OOM killer to spare it, so a
replica over its memory is what gets killed, and the `oom_kill` counter of `--oom-file` says so.
With `--sandboxed` the command is the sandbox (nsenter, bwrap, setpriv): bwrap starts the program
in a session of its own, so a stop signals the processes below the sandbox's outer bwrap
(which would otherwise die at once and take the program down with SIGKILL, skipping the grace
period), and an exit code of 128+N from bwrap means the program was killed by signal N.

State directory files: `keeper.pid` (this process), `child.pid`, `exit.json`
({"exit_code", "signal", "terminated", "oom_killed", "finished"}).
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import BinaryIO

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
ARGS_FD = 3
_libc = ctypes.CDLL(None, use_errno=True)


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _oom_kills(path: str | None) -> int:
    if not path:
        return 0
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except OSError:
        pass
    return 0


def _in_cgroups(dirs: list[str]) -> set[int]:
    pids: set[int] = set()
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                pids.update(int(line) for line in f if line.strip())
        except OSError:
            pass
    return pids


def _preexec(cgroups: list[str], args_file: str | None) -> Callable[[], None]:
    def setup() -> None:
        # Runs in the child before exec: if the keeper itself is SIGKILLed, the replica goes too.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for d in cgroups:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("0")  # undo the keeper's -1000, which children inherit
        if args_file:
            os.dup2(os.open(args_file, os.O_RDONLY), ARGS_FD)

    return setup


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _cannot_start(state_dir: str, log: BinaryIO, program: str, why: str) -> int:
    log.write(f"paddlecloud: cannot start {program!r}: {why}\n".encode())
    _write_atomic(os.path.join(state_dir, "exit.json"), json.dumps(
        {"exit_code": 127, "signal": None, "terminated": False, "oom_killed": False, "finished": time.time()}))
    return 127


def run(args: argparse.Namespace, argv: list[str]) -> int:
    state_dir, grace = args.state_dir, args.grace
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass  # not permitted (not root): the replica's cgroup limit still applies to it alone
    log = open(args.log, "ab", buffering=0)
    program = args.require or argv[0]
    if "/" not in program or not os.path.exists(program):
        return _cannot_start(state_dir, log, program, "No such file or directory")
    oom_before = _oom_kills(args.oom_file)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=_preexec(args.cgroup, args.fd3),
                                 pass_fds=(ARGS_FD,) if args.fd3 else ())
    except OSError as e:
        return _cannot_start(state_dir, log, program, e.strerror or str(e))
    _write_atomic(os.path.join(state_dir, "child.pid"), str(child.pid))

    stop_at: list[float] = []  # set on SIGTERM: when to escalate to SIGKILL

    def on_term(signum: int, frame: FrameType | None) -> None:
        if stop_at:
            return
        stop_at.append(time.monotonic() + grace)
        if not args.sandboxed:
            _kill_group(child.pid, signal.SIGTERM)
            return
        for pid in _descendants(child.pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    status = None
    while status is None:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)  # reaps adopted orphans too
        except ChildProcessError:
            break
        if pid == child.pid:
            status = st
            continue
        if stop_at and time.monotonic() >= stop_at[0]:
            _kill_group(child.pid, signal.SIGKILL)
        time.sleep(0.05)

    # Nothing of the replica may outlive it: its group, any descendants that escaped it, and
    # whatever is in its cgroups (a fork bomb's children keep appearing until they are all gone).
    _kill_group(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        left = set(_descendants(os.getpid())) | _in_cgroups(args.cgroup)
        if not left or time.monotonic() > deadline:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap()
        time.sleep(0.01)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    code = os.waitstatus_to_exitcode(status) if status is not None else -1
    sig = -code if code < 0 else None
    if args.sandboxed and code > 128:
        sig = code - 128
    result = {
        "exit_code": code if code >= 0 else 128 - code,
        "signal": sig,
        "terminated": bool(stop_at),
        "oom_killed": _oom_kills(args.oom_file) > oom_before,
        "finished": time.time(),
    }
    for d in args.cgroup:
        try:
            os.rmdir(d)
        except OSError:
            pass  # the backend removes what is left when the job is deleted
    _write_atomic(os.path.join(state_dir, "exit.json"), json.dumps(result))
    log.close()
    return 0


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--cgroup", action="append", default=[], help="a cgroup directory the command joins")
    parser.add_argument("--oom-file", help="the cgroup file whose oom_kill counter tells an OOM kill")
    parser.add_argument("--fd3", help="a file the command gets open as fd 3 (the sandbox's options)")
    parser.add_argument("--sandboxed", action="store_true", help="the command is the sandbox (see above)")
    parser.add_argument("--require", help="the program, checked before anything starts")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    # Double fork: the launcher gets its answer at once and we are re-parented away from it,
    # so its exit (or a kill -9 of the Celery worker) never touches the replica.
    if os.fork():
        return 0
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir(args.cwd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _write_atomic(os.path.join(args.state_dir, "keeper.pid"), str(os.getpid()))
    os._exit(run(args, argv))


if __name__ == "__main__":
    sys.exit(main())
