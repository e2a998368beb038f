"""Keeper of one local replica process (run as a plain script, no Django).

Like a container runtime's monitor: it detaches from whoever launched it, so the replica and
its exit code outlive a restarted Celery worker or web server. It runs the command in its own
process group with stdout+stderr appended to the log file, becomes a subreaper so daemonised
grandchildren cannot escape, and on SIGTERM stops the group: SIGTERM, then SIGKILL after the
grace period. When the command ends it kills whatever is left of the group and its
descendants, and writes `exit.json` atomically in the state directory.

State directory files: `shim.pid` (this process), `child.pid`, `exit.json`
({"exit_code", "signal", "terminated", "finished"}).
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _die_with_parent() -> None:
    # Runs in the child before exec: if the shim itself is SIGKILLed, the replica goes too.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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


def run(state_dir: str, log_path: str, grace: float, argv: list[str]) -> int:
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    log = open(log_path, "ab", buffering=0)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as e:
        log.write(f"paddlecloud: cannot start {argv[0]!r}: {e.strerror}\n".encode())
        _write_atomic(os.path.join(state_dir, "exit.json"),
                      json.dumps({"exit_code": 127, "signal": None, "terminated": False, "finished": time.time()}))
        return 127
    _write_atomic(os.path.join(state_dir, "child.pid"), str(child.pid))

    stop_at: list[float] = []  # set on SIGTERM: when to escalate to SIGKILL

    def on_term(signum, frame):
        if not stop_at:
            stop_at.append(time.monotonic() + grace)
            _kill_group(child.pid, signal.SIGTERM)

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

    # Nothing of the replica may outlive it: its group, then any descendants that escaped it.
    _kill_group(child.pid, signal.SIGKILL)
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    code = os.waitstatus_to_exitcode(status) if status is not None else -1
    result = {
        "exit_code": code if code >= 0 else 128 - code,
        "signal": -code if code < 0 else None,
        "terminated": bool(stop_at),
        "finished": time.time(),
    }
    _write_atomic(os.path.join(state_dir, "exit.json"), json.dumps(result))
    log.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--cwd", required=True)
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
    _write_atomic(os.path.join(args.state_dir, "shim.pid"), str(os.getpid()))
    os._exit(run(args.state_dir, args.log, args.grace, argv))


if __name__ == "__main__":
    sys.exit(main())
