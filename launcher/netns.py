"""A job's network: one network namespace that its replicas share, with only loopback up.

The replicas reach each other on 127.0.0.1; the host's loopback services (Redis, PostgreSQL, the
web server, this launcher) and other jobs' ports are in other namespaces and out of reach.

As root the namespace is one of iproute2's named ones (/run/netns/<name>), which outlives every
process. Rootless, a holder process keeps it: `unshare` makes a user namespace (the service's uid
is root there, so it may bring loopback up) and a network namespace owned by it, then the holder
sleeps; replicas enter both. The holder's pid file records its namespace's inode, so a pid
reused by another process is never taken for it.

Either way a keeper enters the namespace through descriptors opened here (`Network.fds`), never
by a path or pid it would have to look up again.
"""

from __future__ import annotations

import hashlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .paths import Refused

NETNS_DIR = Path("/run/netns")
READY_TIMEOUT = 10.0
# As root, the named namespaces whose loopback this launcher brought up, with their inode: each of
# a job's replicas asks for the namespace in turn (one job's lock), and every `ip` run is a process
# start, which all but the first would repeat for nothing (30-60 ms each on a busy machine).
_loopback_up: dict[str, int] = {}


@dataclass
class Network:
    net: int  # an open /proc/<pid>/ns/net or /run/netns/<name>
    user: int | None  # rootless: the holder's user namespace, entered first

    @property
    def fds(self) -> list[int]:
        return [self.net] if self.user is None else [self.net, self.user]

    def nsenter(self) -> list[str]:
        """nsenter's arguments for the keeper's command (the descriptors are passed on to it)."""
        if self.user is None:
            return ["nsenter", f"--net=/proc/self/fd/{self.net}"]
        return ["nsenter", f"--user=/proc/self/fd/{self.user}", f"--net=/proc/self/fd/{self.net}",
                "--preserve-credentials"]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def name(jobs_root: str, key: str) -> str:
    """One install's namespace names start with a hash of its jobs root, so installs never share one."""
    return f"pc-{hashlib.sha256(jobs_root.encode()).hexdigest()[:8]}-{key}"


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode and "File exists" not in done.stderr:
        raise Refused(f"{' '.join(cmd)}: {done.stderr.strip()}")


def ensure(state_dir: Path, ns: str) -> Network:
    """The namespace `ns` with loopback up (idempotent), opened."""
    if os.geteuid() == 0:
        if not (NETNS_DIR / ns).exists():
            _run("ip", "netns", "add", ns)
        fd = os.open(NETNS_DIR / ns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            inode = os.fstat(fd).st_ino
            if _loopback_up.get(ns) != inode:
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _loopback_up[ns] = inode
        except BaseException:
            os.close(fd)
            raise
        return Network(fd, None)
    pid = _holder(state_dir, ns) or _start_holder(state_dir, ns)
    user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if os.fstat(net).st_ino != _recorded(state_dir, ns)[1]:  # the holder died meanwhile
        os.close(user)
        os.close(net)
        raise Refused(f"the network namespace {ns} went away while it was being entered")
    return Network(net, user)


def _pid_file(state_dir: Path, ns: str) -> Path:
    return state_dir / "netns" / f"{ns}.pid"


def _recorded(state_dir: Path, ns: str) -> tuple[int, int]:
    try:
        pid, inode = (int(v) for v in _pid_file(state_dir, ns).read_text().split())
    except (OSError, ValueError):
        return 0, 0
    return pid, inode


def _holder(state_dir: Path, ns: str) -> int | None:
    pid, inode = _recorded(state_dir, ns)
    try:
        return pid if pid and os.stat(f"/proc/{pid}/ns/net").st_ino == inode else None
    except OSError:
        return None


def _start_holder(state_dir: Path, ns: str) -> int:
    proc = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--net", "--", "sh", "-c",
         "ip link set lo up && echo ready && exec sleep infinity >/dev/null 2>&1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT)
    if not ready or not proc.stdout.readline():
        proc.kill()
        raise Refused(f"no user and network namespace for {ns}: {proc.communicate()[1].decode()[-500:]}")
    proc.stdout.close()
    proc.stderr.close()
    inode = os.stat(f"/proc/{proc.pid}/ns/net").st_ino
    pid_file = _pid_file(state_dir, ns)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{proc.pid} {inode}\n")
    return proc.pid


def remove(state_dir: Path, ns: str) -> None:
    """Drop the namespace (idempotent). Processes still inside keep it alive until they end."""
    if os.geteuid() == 0:
        _loopback_up.pop(ns, None)
        if (NETNS_DIR / ns).exists():
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        return
    pid = _holder(state_dir, ns)
    if pid:
        os.kill(pid, signal.SIGKILL)
        reap(pid, lambda: _holder(state_dir, ns) is None)
    _pid_file(state_dir, ns).unlink(missing_ok=True)


def reap(pid: int, gone: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for a process just signalled to end: reaped if it is this launcher's child (no zombie
    left behind), else until `gone()` (it was started by a launcher before a restart)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            if gone():
                return
        time.sleep(0.01)
