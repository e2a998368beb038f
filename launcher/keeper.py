"""Keeper of one local replica process, or of a runtime build (run as a plain script, no Django).

Like a container runtime's monitor: it detaches from whoever started it, so the replica and its
exit code outlive a restarted launcher, worker or web server. It runs the command in its own
process group with stdout+stderr going to the log, becomes a subreaper so daemonised
grandchildren cannot escape, and on SIGTERM stops the group: SIGTERM, then SIGKILL after the
grace period. When the command ends it kills whatever is left of the group, its descendants and
its cgroups, and writes `exit.json` atomically in the state directory.

The command joins the replica's cgroups (`--cgroup`) just before it executes; the keeper stays
outside them and asks the OOM killer to spare it, so a replica over its memory is what gets
killed, and the `oom_kill` counter of `--oom-file` says so. With `--disk-limit` the directories
given by `--disk-fd` (the working copy and /tmp) are measured every DISK_INTERVAL seconds and no
file may grow past the limit (RLIMIT_FSIZE): a replica that writes more is killed and recorded
as `disk_limit`, and what it wrote there removed. `--tmp-fd` is emptied when the command ends.
With `--sandboxed` the command is the sandbox (nsenter, bwrap[, setpriv]): bwrap starts the
program in a session of its own, so a stop signals the processes below the sandbox's outer bwrap
(which would otherwise die at once and take the program down with SIGKILL, skipping the grace
period), and an exit code of 128+N from bwrap means the program was killed by signal N.

Every file it touches comes as a descriptor opened by whoever started it (`--state-fd`,
`--log-fd`, ...), never as a path it would resolve itself: started by the launcher it runs as
root, and a path swapped for a link must not make it write anywhere else. `--label` (the state
directory's path) only names it in the process list, so its starter can find it again.

State directory files: `keeper.pid` (this process), `child.pid`, `exit.json`
({"exit_code", "signal", "terminated", "oom_killed", "disk_limit", "finished"}).
"""

import argparse
import contextlib
import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
DISK_INTERVAL = 1.0
_libc = ctypes.CDLL(None, use_errno=True)


def _write_atomic(dir_fd: int, name: str, text: str) -> None:
    fd = os.open(f"{name}.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f"{name}.tmp", name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


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


def disk_usage(dir_fds: list[int]) -> int:
    """Bytes allocated below the directories, each file counted once however many links it has."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top in dir_fds:
        for _dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in dirnames + filenames:
                try:
                    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                except OSError:
                    continue  # removed meanwhile
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def _empty(dir_fd: int) -> None:
    for name in os.listdir(dir_fd):
        try:
            if os.path.isdir(f"/proc/self/fd/{dir_fd}/{name}") and not os.path.islink(f"/proc/self/fd/{dir_fd}/{name}"):
                shutil.rmtree(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass


def _preexec(cgroups: list[str], fsize: int) -> Callable[[], None]:
    def setup() -> None:
        # Runs in the child before exec: if the keeper itself is SIGKILLed, the replica goes too.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for d in cgroups:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("0")  # undo the keeper's -1000, which children inherit
        except OSError:
            pass
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

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
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _result(code: int, sig: int | None = None, terminated: bool = False, oom: bool = False,
            disk: bool = False) -> dict[str, object]:
    return {"exit_code": code, "signal": sig, "terminated": terminated, "oom_killed": oom, "disk_limit": disk,
            "finished": time.time()}


def run(args: argparse.Namespace, argv: list[str]) -> int:
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    _spare_from_oom_killer()
    program = args.require or argv[0]
    if "/" not in program or not os.path.exists(program):
        os.write(args.log_fd, f"paddlecloud: cannot start {program!r}: No such file or directory\n".encode())
        _write_atomic(args.state_fd, "exit.json", json.dumps(_result(127)))
        return 0
    oom_before = _oom_kills(args.oom_file)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=args.log_fd, stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=_preexec(args.cgroup, args.disk_limit),
                             pass_fds=args.pass_fd)
    _write_atomic(args.state_fd, "child.pid", str(child.pid))

    stop_at: list[float] = []  # set on SIGTERM: when to escalate to SIGKILL
    disk_limited: list[bool] = []

    def on_term(signum: int, frame: object) -> None:
        if stop_at:
            return
        stop_at.append(time.monotonic() + args.grace)
        if args.sandboxed:
            _kill(_descendants(child.pid), signal.SIGTERM)
        else:
            _kill_group(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    status = _wait(args, child, stop_at, disk_limited)
    _end_all(child.pid, args.cgroup)
    _write_atomic(args.state_fd, "exit.json", json.dumps(_outcome(args, status, stop_at, disk_limited, oom_before)))
    return 0


def _spare_from_oom_killer() -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass  # not permitted (not root): the replica's cgroup limit still applies to it alone


def _wait(args: argparse.Namespace, child: subprocess.Popen[bytes], stop_at: list[float],
          disk_limited: list[bool]) -> int | None:
    """The child's wait status once it ends (None if it cannot be waited for), reaping adopted
    orphans meanwhile; SIGKILL when the grace after a SIGTERM is over, or the disk limit is hit."""
    status = None
    next_disk_check = time.monotonic() + DISK_INTERVAL
    while status is None:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)  # reaps adopted orphans too
        except ChildProcessError:
            break
        if pid == child.pid:
            status = st
            continue
        now = time.monotonic()
        if stop_at and now >= stop_at[0]:
            _kill_group(child.pid, signal.SIGKILL)
        if args.disk_limit and now >= next_disk_check and not disk_limited:
            if disk_usage(args.disk_fd) >= args.disk_limit:
                disk_limited.append(True)
                _kill([child.pid, *_descendants(child.pid)], signal.SIGKILL)
            next_disk_check = time.monotonic() + DISK_INTERVAL
        time.sleep(0.05)
    return status


def _end_all(child_pid: int, cgroups: list[str]) -> None:
    """Nothing of the replica may outlive it: its group, any descendants that escaped it, and
    whatever is in its cgroups (a fork bomb's children keep appearing until they are all gone)."""
    _kill_group(child_pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        left = set(_descendants(os.getpid())) | _in_cgroups(cgroups)
        if not left or time.monotonic() > deadline:
            break
        _kill(left, signal.SIGKILL)
        _reap()
        time.sleep(0.01)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


def _outcome(args: argparse.Namespace, status: int | None, stop_at: list[float], disk_limited: list[bool],
             oom_before: int) -> dict[str, object]:
    """exit.json's content (the replica's files emptied as it says), its cgroups removed."""
    code = os.waitstatus_to_exitcode(status) if status is not None else -1
    sig = -code if code < 0 else None
    if args.sandboxed and code > 128:
        sig = code - 128
    # A file that reached the limit (RLIMIT_FSIZE: SIGXFSZ, or EFBIG where the program ignores it, as
    # Python does) ends the program before the next measure would: measure once more.
    if args.disk_limit and (sig == signal.SIGXFSZ or disk_usage(args.disk_fd) >= args.disk_limit):
        disk_limited.append(True)
    for fd in args.disk_fd if disk_limited else args.tmp_fd:
        _empty(fd)
    result = _result(code if code >= 0 else 128 - code, sig, bool(stop_at), _oom_kills(args.oom_file) > oom_before,
                     bool(disk_limited))
    for d in args.cgroup:
        with contextlib.suppress(OSError):  # the launcher removes what is left when the job's network goes
            os.rmdir(d)
    return result


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
    parser.add_argument("--label", required=True, help="the state directory's path (names this keeper only)")
    parser.add_argument("--state-fd", type=int, required=True)
    parser.add_argument("--log-fd", type=int, required=True)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--cwd-fd", type=int, required=True)
    parser.add_argument("--cgroup", action="append", default=[], help="a cgroup directory the command joins")
    parser.add_argument("--oom-file", help="the cgroup file whose oom_kill counter tells an OOM kill")
    parser.add_argument("--pass-fd", type=int, action="append", default=[], help="a descriptor the command gets")
    parser.add_argument("--disk-fd", type=int, action="append", default=[], help="a directory bounded by --disk-limit")
    parser.add_argument("--disk-limit", type=int, default=0, help="bytes (0: none)")
    parser.add_argument("--tmp-fd", type=int, action="append", default=[], help="a directory emptied at the end")
    parser.add_argument("--sandboxed", action="store_true", help="the command is the sandbox (see above)")
    parser.add_argument("--require", help="the program, checked before anything starts")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    # Double fork: the starter gets its answer at once and we are re-parented away from it,
    # so its exit (or a kill -9 of the launcher or worker) never touches the replica.
    if os.fork():
        return 0
    os.setsid()
    if os.fork():
        os._exit(0)
    os.fchdir(args.cwd_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _write_atomic(args.state_fd, "keeper.pid", str(os.getpid()))
    os._exit(run(args, argv))


if __name__ == "__main__":
    sys.exit(main())
