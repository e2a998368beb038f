"""The bubblewrap sandbox a replica (or a runtime build) runs in, and the command that starts it.

bwrap builds a fresh mount, PID, IPC and UTS namespace holding only /usr and the interpreter
read-only, the runtime virtualenv read-only, the replica's working copy, /tmp (a directory beside
it, bounded with it: see keeper.py) and its user's home read-write, the public area read-only,
account files written from the request's checked fields, its own /proc. Every directory comes in
as a descriptor the launcher opened race-free (`--bind-fd`), never as a path bwrap would resolve
again. The seccomp filter (seccomp.py) is loaded last, just before the program runs.

As root, setpriv then drops to the job uid (owning nothing on the host), with no capabilities, an
empty bounding set and no_new_privs. setpriv runs as root until it drops, so it gets an empty
environment: the dynamic loader obeys LD_PRELOAD and its other variables in a program that is not
setuid, and a job's own LD_PRELOAD would run the user's code as root. The job's environment is a
file in the sandbox (ENVIRON) that a small Python step (TRAMPOLINE), run after the drop, reads
before it executes the program with it. Rootless, bwrap makes a user namespace of its own inside the
job's (where the service's uid is root) and runs the program as uid 1000 there, with no
capabilities and further user namespaces disabled: on the host it is the service's uid, kept from
the service's files by the mount namespace alone.

The options go through a memfd (`bwrap --args FD`), as does the filter, so the job's environment
never shows in the host's process list. Descriptors keep their numbers from the launcher through
the keeper to bwrap (each passes them on), so the options can name them.
"""

from __future__ import annotations

import functools
import logging
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import seccomp
from .paths import Refused

SETPRIV = "/usr/bin/setpriv"
ENVIRON = "/run/paddlecloud/environ"  # the job's environment, as /proc/PID/environ holds one
# The interpreter the sandbox already holds (sys.base_prefix is bound read-only into every one).
PYTHON = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")
TRAMPOLINE = [PYTHON, "-I", "-S", "-c", (
    "import os, sys\n"
    f"with open({ENVIRON!r}, 'rb') as f:\n"
    "    env = dict(e.split(b'=', 1) for e in f.read().split(b'\\0') if e)\n"
    "os.execvpe(sys.argv[1], sys.argv[1:], env)\n")]
ROOTLESS_UID = 1000
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`)"
PIP_FILE = re.compile(r"  (/.*), exists: (True|False)")  # a file `pip config debug` says pip reads
log = logging.getLogger("launcher")


@dataclass
class Spec:
    """What one sandbox holds: binds are (kind, fd or host path, path inside)."""

    uid: int  # the job uid (root mode); rootless, ROOTLESS_UID runs it
    hostname: str
    chdir: str
    env: dict[str, str]
    binds: list[tuple[str, int | str, str]] = field(default_factory=list)
    tmpfs: list[str] = field(default_factory=list)  # memory-backed directories (a build's /tmp)

    def fds(self) -> list[int]:
        return [source for _, source, _ in self.binds if isinstance(source, int)]


def _base_options(rootless: bool) -> list[str]:
    opts = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL"]
    if rootless:
        opts += ["--unshare-user", "--disable-userns", "--uid", str(ROOTLESS_UID), "--gid", str(ROOTLESS_UID)]
    else:  # only for setpriv's switch to the job uid, which drops them all again
        opts += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    opts += ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):  # merged-/usr links, or the real directories
        host = Path("/") / top
        if host.is_symlink():
            opts += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            opts += ["--ro-bind", str(host), str(host)]
    opts += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "0755",
             "--dir", "/etc"]
    for etc in ("/etc/ld.so.cache", "/etc/ssl", "/etc/ca-certificates", "/etc/localtime"):
        opts += ["--ro-bind-try", etc, etc]
    return opts


def _dirs_for(target: str, made: set[str]) -> list[str]:
    """Ancestors of a mount point, made world-traversable (bwrap would make them 0700)."""
    opts = []
    for parent in reversed(PurePosixPath(target).parents):
        p = str(parent)
        if p in ("/", "/usr") or p in made:
            continue
        made.add(p)
        opts += ["--perms", "0755", "--dir", p]
    return opts


def options(spec: Spec, rootless: bool, data_fds: dict[str, int], seccomp_fd: int) -> list[str]:
    """bwrap's options for `spec`; `data_fds` holds a descriptor with each file's text."""
    opts = _base_options(rootless) + ["--hostname", spec.hostname]
    made = {"/etc"}  # _base_options makes it
    for target in spec.tmpfs:  # first: what is bound below it must stay visible
        opts += _dirs_for(target, made) + ["--perms", "1777", "--tmpfs", target]
    for kind, source, target in [("--ro-bind", sys.base_prefix, sys.base_prefix), *spec.binds]:
        if target.startswith("/usr/"):
            continue  # already there
        flag = kind + "-fd" if isinstance(source, int) else kind
        opts += _dirs_for(target, made) + [flag, str(source), target]
    for target, fd in data_fds.items():
        opts += _dirs_for(target, made) + ["--perms", "0644", "--ro-bind-data", str(fd), target]
    # The sandbox's own root (a tmpfs holding the mount points) read-only: rootless, the job would
    # own it otherwise.
    # No --setenv: what bwrap sets reaches setpriv, root until it drops (the module's docstring).
    opts += ["--remount-ro", "/", "--chdir", spec.chdir, "--clearenv"]
    return opts + ["--seccomp", str(seccomp_fd)]


def environ(env: dict[str, str]) -> bytes:
    """`env` as the file ENVIRON holds it: NAME=value, each ended by a NUL."""
    if any(not k or "=" in k or "\0" in k + v for k, v in env.items()):
        raise ValueError("an environment variable's name holds '=' or NUL, or its value NUL")
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def _setpriv(uid: int) -> list[str]:
    return [SETPRIV, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--no-new-privs",
            "--bounding-set", "-all", "--inh-caps", "-all", "--"]


def command(nsenter: list[str], args_fd: int, uid: int, argv: list[str], rootless: bool) -> list[str]:
    """The keeper's command: enter the job's network, build the sandbox, drop to `uid`, run argv
    with the environment in ENVIRON."""
    drop = [] if rootless else _setpriv(uid)
    return [*nsenter, "bwrap", "--args", str(args_fd), "--", *drop, *TRAMPOLINE, *argv]


def memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # inheritable: the keeper hands it on to bwrap
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def args_fd(opts: list[str]) -> int:
    return memfd("bwrap-args", b"".join(o.encode() + b"\0" for o in opts))


def seccomp_fd() -> int:
    return memfd("seccomp", seccomp.program())


def account_files(uid: int, username: str, home_at: str, hostname: str, resolv_conf: str) -> dict[str, str]:
    """Minimal account and host files, so tools that look up the current user or resolve the
    sandbox's own hostname (as gloo does) find them; resolv.conf only where there is a way out."""
    return {
        "/etc/passwd": f"root:x:0:0::/:/usr/sbin/nologin\n{username}:x:{uid}:{uid}::{home_at}:/bin/sh\n",
        "/etc/group": f"root:x:0:\n{username}:x:{uid}:\n",
        "/etc/hosts": f"127.0.0.1 localhost {hostname}\n::1 localhost\n",
        "/etc/resolv.conf": resolv_conf,
        "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }


def _changeable(path: str) -> str | None:
    """The first step of `path`, as written and then resolved, that an account other than root (or
    this process's own) could change, or None: what only they control cannot be swapped under us.
    A sticky directory (/tmp) may be writable on the way: others cannot rename what it holds."""
    trusted = {0, os.geteuid()}
    for full in (path, os.path.realpath(path)):
        names = [n for n in full.split("/") if n not in ("", ".")]
        if not full.startswith("/") or ".." in names:
            return full
        steps = ["/", *("/" + "/".join(names[:i]) for i in range(1, len(names) + 1))]
        for i, step in enumerate(steps):
            try:
                st = os.lstat(step)
            except OSError:
                return step
            shared = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0)
            sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and i < len(steps) - 1
            if st.st_uid not in trusted or (shared and not stat.S_ISLNK(st.st_mode) and not sticky):
                return step
    return None


def _pip_config(*args: str) -> str | None:
    """`pip config ARGS`'s output (None if it failed), with the HOME of this process's own account:
    `make run` hands the launcher the service's state directory as HOME, where the service could
    write a pip.conf. Isolated (-I), from /: nothing of the caller's environment or directory runs."""
    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = "/nonexistent"
    done = subprocess.run([sys.executable, "-I", "-m", "pip", "config", *args], capture_output=True, text=True,
                          env={**os.environ, "HOME": home}, cwd="/")
    return done.stdout if done.returncode == 0 else None


def pip_environment() -> dict[str, str]:
    """pip's effective configuration on the host (its files and PIP_* variables) as PIP_*
    variables, so a build in the sandbox, which sees none of the host's config files, installs
    from the same indexes and wheel directories. Refused while a file pip reads is one another
    account could change: its settings would become the build's, its paths bind mounts."""
    debug = _pip_config("debug")
    if debug is None:  # no pip beside the launcher, or a file it cannot parse: no settings, as ever
        return {}
    listed = [m for m in map(PIP_FILE.fullmatch, debug.splitlines()) if m]
    if not listed:
        raise Refused("`pip config debug` names no file: cannot tell where pip's configuration comes from")
    for entry in listed:
        if entry[2] == "True" and (step := _changeable(entry[1])):
            raise Refused(f"pip reads {entry[1]}, which another account than root can change ({step}): "
                          "make it and its directories root's, writable by root alone, or remove it")
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in (_pip_config("list") or "").splitlines():
        match = re.fullmatch(r"([^.]*)\.([^=]+)='(.*)'", line)
        if match and match[1] in ("global", "install", ":env:"):
            (env if match[1] == ":env:" else files)[f"PIP_{match[2].upper().replace('-', '_')}"] = match[3]
    return {**files, **env}


def local_paths(values: list[str]) -> list[str]:
    """The local files and directories named in pip settings: wheel directories, constraint
    files, and file:// indexes with their parent (an index's pages link to files beside it).
    Only those no other account can change: bwrap binds them by path, as root."""
    found = []
    for value in values:
        for token in value.split():
            path = os.path.dirname(token.removeprefix("file://").rstrip("/")) if token.startswith("file://") else token
            if path.startswith("/") and path != "/" and os.path.exists(path) and path not in found:
                if step := _changeable(path):
                    log.warning("pip's setting %s is not bound into builds: another account than root can "
                                "change %s", path, step)
                    continue
                found.append(path)
    return found


@functools.cache
def probe(rootless: bool) -> str | None:
    """None when the sandbox works on this machine, else why not and the fix (tried once per
    launcher: every launch asks, and a start of bwrap costs tens of milliseconds)."""
    missing = [tool for tool in ("bwrap", "nsenter", "ip", "unshare") if not shutil.which(tool)]
    if not rootless and not os.access(SETPRIV, os.X_OK):
        missing.append("setpriv")
    if missing:
        hint = INSTALL_HINT if "bwrap" in missing else "install util-linux and iproute2"
        return f"{', '.join(missing)} not found: {hint}"
    if not os.access(PYTHON, os.X_OK):
        return f"{PYTHON} (the sandbox's interpreter, sys.base_prefix's) not found: start the service with a CPython"
    filt, env = seccomp_fd(), memfd("environ", environ({"PATH": "/usr/bin:/bin"}))
    args = args_fd(options(Spec(65534, "probe", "/", {}), rootless, {ENVIRON: env}, filt))
    try:
        done = subprocess.run(command([], args, 65534, ["true"], rootless), capture_output=True, text=True,
                              timeout=30, pass_fds=(args, filt, env))
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap does not run: {e}; {INSTALL_HINT}"
    finally:
        for fd in (args, filt, env):
            os.close(fd)
    if done.returncode:
        hint = ("run as a normal user, jobs need unprivileged user namespaces: allow them (sysctl "
                "kernel.unprivileged_userns_clone=1, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0) or "
                "start the service as root" if rootless else f"check `bwrap --version` and {INSTALL_HINT}")
        return f"bwrap does not work here: {done.stderr.strip()[-500:]}; {hint}"
    return None
