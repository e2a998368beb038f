"""Outside access for a network namespace, through slirp4netns (user-mode NAT, Debian package
`slirp4netns`), with the host's loopback disabled: a job with `internet` on reaches the internet
and whatever the host serves on its outward addresses, like any outside client would, but never
the service's sockets on 127.0.0.1. Its DNS resolver is slirp4netns's, at 10.0.2.3.

slirp4netns runs in a session of its own, so a restarted launcher or service does not take it
down; its pid file (in the launcher's own state directory) says which process to stop when the
namespace goes. Rootless, it joins the namespace's user namespace first, as a replica does. It
runs in slirp4netns's own sandbox (an empty root, a seccomp filter): it parses the job's packets.

Link-local addresses (where every major cloud, Baidu's BCE included, serves instance metadata and
the host's credentials, at 169.254.169.254) and Alibaba's metadata address are unreachable from the
namespace: routes the job cannot change, having no capabilities there. Kubernetes jobs have these
blocked by their NetworkPolicy.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
from pathlib import Path

from .netns import Network, reap
from .paths import Refused

RESOLV_CONF = "nameserver 10.0.2.3\n"
READY_TIMEOUT = 10.0
UNREACHABLE = ("169.254.0.0/16", "100.100.100.200/32")


def _live(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except (OSError, ValueError):
        return None
    return pid if b"slirp4netns" in cmdline else None


def start(network: Network, pid_file: Path) -> None:
    """Give the namespace a NAT'd route out (idempotent)."""
    if _live(pid_file):
        return
    _block_metadata(network)
    read_end, write_end = os.pipe()
    # Rootless, slirp4netns starts inside the user namespace and is told it is its own: its sandbox
    # fails with a namespace given by path (slirp4netns issue 317).
    userns = [] if network.user is None else [
        "nsenter", f"--user=/proc/self/fd/{network.user}", "--preserve-credentials"]
    user_path = [] if network.user is None else ["--userns-path=/proc/self/ns/user"]
    try:
        proc = subprocess.Popen(
            [*userns, "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
             "--enable-seccomp", f"--ready-fd={write_end}",
             *user_path, "--netns-type=path", f"/proc/self/fd/{network.net}", "tap0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(write_end, *network.fds), start_new_session=True)
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], READY_TIMEOUT)
        if not ready or not os.read(read_end, 1):
            proc.kill()
            raise Refused(f"slirp4netns did not configure the job's network: {proc.communicate()[1].decode()[-500:]}")
    finally:
        os.close(read_end)
    assert proc.stderr is not None  # stderr=PIPE above
    proc.stderr.close()
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(str(proc.pid))


def _block_metadata(network: Network) -> None:
    """Before the route out exists: from then on no packet of the job's reaches these addresses."""
    routes = "".join(f"route replace unreachable {cidr}\n" for cidr in UNREACHABLE)
    done = subprocess.run([*network.nsenter(), "ip", "-batch", "-"], input=routes, capture_output=True, text=True,
                          pass_fds=network.fds)
    if done.returncode:
        raise Refused(f"the job's network could not be closed to the metadata service: {done.stderr.strip()[-500:]}")


def stop(pid_file: Path) -> None:
    pid = _live(pid_file)
    if pid:
        os.kill(pid, signal.SIGTERM)
        reap(pid, lambda: _live(pid_file) is None)
    pid_file.unlink(missing_ok=True)
