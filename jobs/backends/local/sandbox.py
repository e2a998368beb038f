"""The bubblewrap sandbox a local replica runs in.

bwrap runs as root (so it can bind directories that only root can reach, such as pytest's or
pyenv's under /root) and builds a fresh mount, PID, IPC and UTS namespace holding only: /usr
and the interpreter read-only, the runtime virtualenv read-only, the replica's working copy and
its user's home read-write, the datacenter's public area read-only, a private /tmp and /dev/shm,
its own /proc. setpriv (from /usr) then drops to the user's job uid (JOB_UID_BASE + user id,
owning nothing on the host), with no capabilities, an empty bounding set and no_new_privs, and
executes the program. The network namespace is the job's (netns.py), entered with nsenter.

The bwrap options go through a file on fd 3 (`bwrap --args 3`), so the job's environment never
shows in the host's process list.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)
ARGS_FD = 3
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`)"
SETPRIV = "/usr/bin/setpriv"


class Unavailable(Exception):
    """The sandbox cannot run here; the message says why and how to fix it."""


def job_uid(user: User) -> int:
    uid: int = settings.JOB_UID_BASE + user.pk  # ids start at 1: JOB_UID_BASE itself is the build uid
    return uid


def _base_options() -> list[str]:
    opts = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL",
            # Only for setpriv's switch to the job uid, which drops them all again.
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
            "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):  # merged-/usr links, or the real directories
        host = Path("/") / top
        if host.is_symlink():
            opts += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            opts += ["--ro-bind", str(host), str(host)]
    opts += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm",
             "--perms", "1777", "--tmpfs", "/tmp", "--perms", "0755", "--dir", "/etc"]
    for etc in ("/etc/ld.so.cache", "/etc/ssl", "/etc/ca-certificates", "/etc/localtime"):
        opts += ["--ro-bind-try", etc, etc]
    return opts


def _setpriv(uid: int) -> list[str]:
    return [SETPRIV, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--no-new-privs",
            "--bounding-set", "-all", "--inh-caps", "-all", "--"]


@functools.cache
def probe() -> str | None:
    """None when the sandbox works on this machine, else why not and the fix (checked once per
    process, and logged then)."""
    why = _probe()
    if why:
        log.warning("local jobs cannot be sandboxed here, so they fail (SandboxUnavailable): %s", why)
    return why


def _probe() -> str | None:
    if os.geteuid() != 0:
        return ("the local sandbox needs the service to run as root (it gives every job its own uid and "
                "network namespace); run it as root, or set isolation: \"none\" on a single-user machine")
    missing = [tool for tool in ("bwrap", "nsenter", "ip") if not shutil.which(tool)]
    if not os.access(SETPRIV, os.X_OK):
        missing.append("setpriv")
    if missing:
        hint = INSTALL_HINT if "bwrap" in missing else "install util-linux and iproute2"
        return f"{', '.join(missing)} not found: {hint}"
    try:
        done = subprocess.run(["bwrap", *_base_options(), "--", *_setpriv(settings.JOB_UID_BASE), "/bin/true"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap does not run: {e}; {INSTALL_HINT}"
    if done.returncode:
        return f"bwrap does not work here: {done.stderr.strip()[-500:]}; check `bwrap --version` and {INSTALL_HINT}"
    return None


def check() -> None:
    why = probe()
    if why:
        raise Unavailable(why)


def _dirs_for(target: str, made: set[str]) -> list[str]:
    """Ancestors of a mount point, made world-traversable (bwrap would make them 0700)."""
    opts = []
    for parent in reversed(PurePosixPath(target).parents):
        p = str(parent)
        if p in ("/", "/tmp", "/usr") or p in made:
            continue
        made.add(p)
        opts += ["--perms", "0755", "--dir", p]
    return opts


def options(*, hostname: str, work: Path, home: Path, home_at: str, public: Path, public_at: str, venv: Path,
            etc: Path, env: dict[str, str]) -> list[str]:
    """bwrap's options for one replica (see the module's docstring for what it sees)."""
    opts = _base_options() + ["--hostname", hostname]
    made: set[str] = set()
    binds = [("--ro-bind", Path(sys.base_prefix), str(sys.base_prefix)), ("--ro-bind", venv, str(venv)),
             ("--bind", work, str(work)), ("--bind", home, home_at), ("--ro-bind-try", public, public_at)]
    for kind, source, target in binds:
        if target.startswith("/usr/"):
            continue  # already there
        opts += _dirs_for(target, made) + [kind, str(source), target]
    for name in ("passwd", "group", "hosts", "resolv.conf", "nsswitch.conf"):
        opts += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    opts += ["--chdir", str(work), "--clearenv"]
    for key, value in env.items():
        opts += ["--setenv", key, value]
    return opts


def command(netns: Path, uid: int, argv: list[str]) -> list[str]:
    """The keeper's command: enter the job's network namespace, build the sandbox, drop to `uid`."""
    return ["nsenter", f"--net={netns}", "bwrap", "--args", str(ARGS_FD), "--", *_setpriv(uid), *argv]


def pip_environment() -> dict[str, str]:
    """pip's effective configuration on the host (its files and PIP_* variables) as PIP_*
    variables, so a build in the sandbox, which sees none of the host's config files, installs
    from the same indexes and wheel directories."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"([^.]*)\.([^=]+)='(.*)'", line)
        if match and match[1] in ("global", "install", ":env:"):
            (env if match[1] == ":env:" else files)[f"PIP_{match[2].upper().replace('-', '_')}"] = match[3]
    return {**files, **env}


def _local_paths(values: Iterable[str]) -> list[str]:
    """The local files and directories named in pip settings: wheel directories, constraint
    files, and file:// indexes with their parent (an index's pages link to files beside it)."""
    found = []
    for value in values:
        for token in value.split():
            path = os.path.dirname(token.removeprefix("file://").rstrip("/")) if token.startswith("file://") else token
            if path.startswith("/") and path != "/" and os.path.exists(path) and path not in found:
                found.append(path)
    return found


BUILD_HOSTNAME = "paddlecloud-build"
BUILD_ETC = ("hosts", "resolv.conf")


def build_command(target: Path, etc: Path, env: dict[str, str], netns: Path, argv: list[str]) -> list[str]:
    """A runtime build (pip install, which runs setup scripts of user-chosen packages) in a
    sandbox: the build uid, only the virtualenv being built writable, pip's local wheel
    directories and indexes read-only, the network through `netns` (see egress.py)."""
    opts = _base_options() + ["--hostname", BUILD_HOSTNAME]
    made: set[str] = set()
    binds = [("--ro-bind", p, p) for p in [sys.base_prefix, *_local_paths(env.values())]]
    for kind, source, target_at in [*binds, ("--bind", str(target), str(target))]:
        if not target_at.startswith(("/usr/", "/etc/ssl/")):
            opts += _dirs_for(target_at, made) + [kind, source, target_at]
    for name in BUILD_ETC:
        opts += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    opts += ["--chdir", "/tmp", "--clearenv"]
    base = {"PATH": f"{target}/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PIP_CONFIG_FILE": os.devnull}
    for key, value in {**env, **base}.items():
        opts += ["--setenv", key, value]
    return ["nsenter", f"--net={netns}", "bwrap", *opts, "--", *_setpriv(settings.JOB_UID_BASE), *argv]


def write_options(path: Path, opts: list[str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(b"".join(o.encode() + b"\0" for o in opts))


def write_etc(etc: Path, uid: int, username: str, home_at: str, hostname: str, resolv_conf: str) -> None:
    """Minimal account and host files, so tools that look up the current user or resolve the
    sandbox's own hostname (as gloo does) find them; resolv.conf only where there is a way out."""
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "passwd").write_text(f"root:x:0:0::/:/usr/sbin/nologin\n{username}:x:{uid}:{uid}::{home_at}:/bin/sh\n")
    (etc / "group").write_text(f"root:x:0:\n{username}:x:{uid}:\n")
    (etc / "hosts").write_text(f"127.0.0.1 localhost {hostname}\n::1 localhost\n")
    (etc / "resolv.conf").write_text(resolv_conf)
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")


def write_build_etc(etc: Path, resolv_conf: str) -> None:
    """The host files a runtime build sees (BUILD_ETC): its own hostname resolves, and names
    resolve through its route out."""
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(f"127.0.0.1 localhost {BUILD_HOSTNAME}\n")
    (etc / "resolv.conf").write_text(resolv_conf)


def give_to(top: Path, uid: int) -> None:
    """Make `top` and everything below it owned by `uid`, by name inside directories opened
    without following links, so a job swapping a directory for a link mid-walk changes nothing
    outside `top`. Files with more than one hard link are left alone: another name of theirs may
    be outside `top` (a service file linked into a home), and changing its owner would hand it over."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if os.fstat(fd).st_uid != uid:
            os.fchown(fd, uid, uid)
    finally:
        os.close(fd)
    for _dirpath, dirnames, filenames, dirfd in os.fwalk(top, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if st.st_uid != uid and (stat.S_ISDIR(st.st_mode) or st.st_nlink == 1):
                    os.chown(name, uid, uid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                pass  # removed by a running job meanwhile
