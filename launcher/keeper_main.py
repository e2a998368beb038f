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

# Only what a start needs, and nothing that imports much more: every replica's start is one of
# these interpreters starting up, side by side with the others' and with the replicas' own
# (argparse, subprocess, json, shutil, signal and collections cost ~30 ms of CPU here, the
# interpreter itself ~10). _signal is signal's C core, already loaded at start-up (signal adds
# enum and functools); ctypes (prctl) is loaded once the keeper's pid is written.
import _signal
import os
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
DISK_INTERVAL = 1.0
DISK_SHARE = 4  # a measure that took t seconds waits DISK_SHARE * t for the next, if longer than DISK_INTERVAL
Convert = type[int] | type[float] | type[str]
# The command line: option -> (attribute, type, may repeat); --sandboxed takes no value.
OPTIONS: dict[str, tuple[str, Convert, bool]] = {
    "--label": ("label", str, False), "--state-fd": ("state_fd", int, False), "--log-fd": ("log_fd", int, False),
    "--grace": ("grace", float, False), "--cwd-fd": ("cwd_fd", int, False), "--cgroup": ("cgroup", str, True),
    "--oom-file": ("oom_file", str, False), "--pass-fd": ("pass_fd", int, True), "--disk-fd": ("disk_fd", int, True),
    "--disk-limit": ("disk_limit", int, False), "--tmp-fd": ("tmp_fd", int, True), "--require": ("require", str, False),
}
REQUIRED = ("--label", "--state-fd", "--log-fd", "--cwd-fd")


class Options:
    """What the starter asked for (see the module's docstring for each option)."""

    def __init__(self) -> None:
        self.label = ""
        self.state_fd = self.log_fd = self.cwd_fd = -1
        self.grace = 10.0
        self.cgroup: list[str] = []  # cgroup directories the command joins
        self.oom_file: str | None = None  # the cgroup file whose oom_kill counter tells an OOM kill
        self.pass_fd: list[int] = []  # descriptors the command gets
        self.disk_fd: list[int] = []  # directories bounded by disk_limit
        self.disk_limit = 0  # bytes (0: none)
        self.tmp_fd: list[int] = []  # directories emptied at the end
        self.sandboxed = False
        self.require: str | None = None  # the program, checked before anything starts
        self.argv: list[str] = []


def parse(argv: list[str]) -> Options:
    """`--option value ... [--] command...`; ValueError says what is wrong."""
    opts, given, i = Options(), set(), 0
    while i < len(argv) and argv[i].startswith("-"):
        flag = argv[i]
        if flag == "--":
            i += 1
            break
        if flag == "--sandboxed":
            opts.sandboxed, i = True, i + 1
            continue
        if flag not in OPTIONS or i + 1 == len(argv):
            raise ValueError(f"{flag}: unknown, or without its value (known: --sandboxed {' '.join(OPTIONS)})")
        name, convert, repeats = OPTIONS[flag]
        try:
            value = convert(argv[i + 1])
        except ValueError:
            raise ValueError(f"{flag}: {argv[i + 1]!r} is not a {convert.__name__}")
        if repeats:
            getattr(opts, name).append(value)
        else:
            setattr(opts, name, value)
        given.add(flag)
        i += 2
    missing = [flag for flag in REQUIRED if flag not in given]
    if missing:
        raise ValueError(f"required: {' '.join(missing)}")
    opts.argv = argv[i:]
    if not opts.argv:
        raise ValueError("no command")
    return opts


def _prctl(option: int, arg: int) -> None:
    import ctypes  # here, not above: see the imports

    ctypes.CDLL(None, use_errno=True).prctl(option, arg)


def _write_atomic(dir_fd: int, name: str, text: str, durable: bool = True) -> None:
    """Whole or not at all; `durable`: its content on disk first (an exit code must survive a
    crash, and an empty exit.json would not parse). A pid needs no fsync, which takes ~10 ms on
    the path to Running: no process outlives a crash, and an empty pid file reads as a keeper lost."""
    tmp = f"{name}.tmp"
    for _ in range(3):
        # A new file, never one left there: the directory is the service's, and a FIFO would hold
        # the open, a hard link to a root file would be emptied and written.
        try:  # noqa: SIM105 - contextlib is one more import at every replica's start
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue  # made again meanwhile
    else:
        raise FileExistsError(f"{tmp} is made again each time it is removed")
    try:
        os.write(fd, text.encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def to_json(values: dict[str, object]) -> str:
    """exit.json's text: numbers, booleans and None only (importing json costs more than this
    keeper's whole start, and it runs at the end of every replica, just before a queued job's)."""
    words = {True: "true", False: "false"}
    return "{" + ", ".join(f'"{key}": ' + ("null" if value is None else words[value] if isinstance(value, bool)
                                          else repr(value)) for key, value in values.items()) + "}"


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


def disk_usage(dir_fds: list[int], limit: int = 0) -> int:
    """What the directories cost the disk limit, at least `limit` once that is reached (disk.usage:
    a measure costs the keeper memory and time bounded by the limit, whatever the job makes)."""
    from . import disk  # here, not above: see the imports (measured from the first DISK_INTERVAL on)

    return disk.usage(dir_fds, limit)


def _empty(dir_fd: int) -> None:
    from . import fdtree  # here, not above: see the imports (shutil.rmtree: it recurses per level)

    fdtree.clear(dir_fd)


def _start(opts: Options, argv: list[str]) -> int:
    """Fork the command (what subprocess.Popen did, without its import): stdin from /dev/null,
    stdout+stderr to the log, in a session of its own, with only the passed descriptors."""
    keeper = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        _exec(opts, argv, keeper)
    finally:
        os._exit(127)  # whatever happened, never back into the keeper's code


def _exec(opts: Options, argv: list[str], keeper: int) -> None:
    """In the child: what to set up before the command runs, then run it (a failure is logged)."""
    try:
        os.dup2(opts.log_fd, 1)
        os.dup2(opts.log_fd, 2)
        for fd in opts.pass_fd:
            os.set_inheritable(fd, True)
        for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):  # which Python ignores, and the command inherits
            _signal.signal(sig, _signal.SIG_DFL)
        os.setsid()
        # If the keeper itself is SIGKILLed, the replica goes too (and if it already was, at once).
        _prctl(PR_SET_PDEATHSIG, _signal.SIGKILL)
        if os.getppid() != keeper:
            return
        for d in opts.cgroup:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("0")  # undo the keeper's -1000, which children inherit
        except OSError:
            pass
        if opts.disk_limit:
            import resource  # here, not above: see the imports

            resource.setrlimit(resource.RLIMIT_FSIZE, (opts.disk_limit, opts.disk_limit))
        keep = sorted({0, 1, 2, *opts.pass_fd})
        for low, high in zip([k + 1 for k in keep], [*keep[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
            os.closerange(low, high)
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, f"paddlecloud: cannot start {argv[0]!r}: {e}\n".encode())


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


def _kill(pids: list[int] | set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue  # gone already (try, not contextlib.suppress: see the imports)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return  # gone already


def _result(code: int, sig: int | None = None, terminated: bool = False, oom: bool = False,
            disk: bool = False) -> dict[str, object]:
    return {"exit_code": code, "signal": sig, "terminated": terminated, "oom_killed": oom, "disk_limit": disk,
            "finished": time.time()}


def run(opts: Options) -> int:
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _spare_from_oom_killer()
    program = opts.require or opts.argv[0]
    if "/" not in program or not os.path.exists(program):
        os.write(opts.log_fd, f"paddlecloud: cannot start {program!r}: No such file or directory\n".encode())
        _write_atomic(opts.state_fd, "exit.json", to_json(_result(127)))
        return 0
    oom_before = _oom_kills(opts.oom_file)
    child = _start(opts, opts.argv)
    _write_atomic(opts.state_fd, "child.pid", str(child), durable=False)

    stop_at: list[float] = []  # set on SIGTERM: when to escalate to SIGKILL
    disk_limited: list[bool] = []

    def on_term(signum: int, frame: object) -> None:
        if stop_at:
            return
        stop_at.append(time.monotonic() + opts.grace)
        if opts.sandboxed:
            _kill(_descendants(child), _signal.SIGTERM)
        else:
            _kill_group(child, _signal.SIGTERM)

    _signal.signal(_signal.SIGTERM, on_term)
    _signal.signal(_signal.SIGINT, on_term)
    status = _wait(opts, child, stop_at, disk_limited)
    _end_all(child, opts.cgroup)
    _write_atomic(opts.state_fd, "exit.json", to_json(_outcome(opts, status, stop_at, disk_limited, oom_before)))
    return 0


def _spare_from_oom_killer() -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass  # not permitted (not root): the replica's cgroup limit still applies to it alone


def _wait(opts: Options, child: int, stop_at: list[float], disk_limited: list[bool]) -> int | None:
    """The child's wait status once it ends (None if it cannot be waited for), reaping adopted
    orphans meanwhile; SIGKILL when the grace after a SIGTERM is over, or the disk limit is hit."""
    status = None
    next_disk_check = time.monotonic() + DISK_INTERVAL
    while status is None:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)  # reaps adopted orphans too
        except ChildProcessError:
            break
        if pid == child:
            status = st
            continue
        now = time.monotonic()
        if stop_at and now >= stop_at[0]:
            _kill_group(child, _signal.SIGKILL)
        if opts.disk_limit and now >= next_disk_check and not disk_limited:
            if disk_usage(opts.disk_fd, opts.disk_limit) >= opts.disk_limit:
                disk_limited.append(True)
                _kill([child, *_descendants(child)], _signal.SIGKILL)
            # Near its limit a job of millions of small files takes the keeper seconds to measure:
            # it runs outside the job's cgroup, so it must not spend a whole CPU doing it.
            took = time.monotonic() - now
            next_disk_check = time.monotonic() + max(DISK_INTERVAL, DISK_SHARE * took)
        time.sleep(0.05)
    return status


def _end_all(child_pid: int, cgroups: list[str]) -> None:
    """Nothing of the replica may outlive it: its group, any descendants that escaped it, and
    whatever is in its cgroups (a fork bomb's children keep appearing until they are all gone)."""
    _kill_group(child_pid, _signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        left = set(_descendants(os.getpid())) | _in_cgroups(cgroups)
        if not left or time.monotonic() > deadline:
            break
        _kill(left, _signal.SIGKILL)
        _reap()
        time.sleep(0.01)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


def _outcome(opts: Options, status: int | None, stop_at: list[float], disk_limited: list[bool],
             oom_before: int) -> dict[str, object]:
    """exit.json's content (the replica's files emptied as it says), its cgroups removed."""
    code = os.waitstatus_to_exitcode(status) if status is not None else -1
    sig = -code if code < 0 else None
    if opts.sandboxed and code > 128:
        sig = code - 128
    # A file that reached the limit (RLIMIT_FSIZE: SIGXFSZ, or EFBIG where the program ignores it, as
    # Python does) ends the program before the next measure would: measure once more.
    if opts.disk_limit and (sig == _signal.SIGXFSZ or disk_usage(opts.disk_fd, opts.disk_limit) >= opts.disk_limit):
        disk_limited.append(True)
    for fd in opts.disk_fd if disk_limited else opts.tmp_fd:
        _empty(fd)
    result = _result(code if code >= 0 else 128 - code, sig, bool(stop_at), _oom_kills(opts.oom_file) > oom_before,
                     bool(disk_limited))
    for d in opts.cgroup:
        try:
            os.rmdir(d)
        except OSError:
            continue  # the launcher removes what is left when the job's network goes
    return result


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def main(argv: list[str]) -> int:
    try:
        opts = parse(argv)
    except ValueError as e:
        sys.stderr.write(f"keeper.py: {e}\n")
        return 2
    # Double fork: we are re-parented away from the starter, so its exit (or a kill -9 of the
    # launcher or worker) never touches the replica. It gets its answer once keeper.pid is there
    # (what it waits for next), or at once if we failed before.
    written, done = os.pipe()
    if os.fork():
        os.close(done)
        return 0 if os.read(written, 1) else 1
    os.close(written)
    os.setsid()
    if os.fork():
        os._exit(0)
    os.fchdir(opts.cwd_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _write_atomic(opts.state_fd, "keeper.pid", str(os.getpid()), durable=False)
    os.write(done, b".")
    os.close(done)
    os._exit(run(opts))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
