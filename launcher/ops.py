"""The launcher's vocabulary: every request it accepts, each checked here before anything runs.

A request is {"op": name, ...arguments}. Paths must lie below the root their role allows (a
working copy below the jobs root, a home below the PFS root, ...) and are opened race-free
(paths.py); uids must be in the job range; names, numbers, the environment and the command line
are bounded. What a replica may see is decided here, from those checked fields, not by the caller.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cgroups, egress, netns, ownership, sandbox
from .paths import NAME, Refused, Roots

KEEPER = Path(__file__).with_name("keeper.py")
# The keeper's own environment (the job's goes to the sandbox): enough to find nsenter and bwrap.
KEEPER_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
REPLICA = re.compile(r"(pserver|trainer)-\d{1,5}")
HOSTNAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
RESOLV_CONF = "nameserver 10.0.2.3\n"  # slirp4netns's resolver
BUILD_HOSTNAME = "paddlecloud-build"
MAX_ARGS_BYTES = 1 << 20


@dataclass(frozen=True)
class Setup:
    """What the launcher was started with (by root, before any request)."""

    roots: Roots
    state_dir: Path  # the launcher's own: pid files of namespace holders and slirp4netns
    service_uid: int
    job_uids: range | None  # None rootless: jobs run under the service's uid
    rootless: bool


def _int(req: dict[str, Any], key: str, low: int, high: int) -> int:
    value = req.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Refused(f"{key}: a whole number from {low} to {high}")
    return value


def _text(req: dict[str, Any], key: str, pattern: re.Pattern[str]) -> str:
    value = req.get(key)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise Refused(f"{key}: {value!r} is not allowed")
    return value


def _inside_path(req: dict[str, Any], key: str) -> str:
    """A path as the replica sees it (where a directory is mounted)."""
    value = req.get(key)
    if not isinstance(value, str) or not value.startswith("/pfs/") or "\0" in value or "/." in value \
            or len(value) > 4096 or value != os.path.normpath(value):
        raise Refused(f"{key}: {value!r} is not a path below /pfs")
    return value


def _strings(value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and "\0" not in v for v in value):
        raise Refused(f"{key}: a non-empty list of strings")
    return value


def _env(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and ENV_KEY.fullmatch(k) and isinstance(v, str)
                                              and "\0" not in v for k, v in value.items()):
        raise Refused("env: names of letters, digits and _, with string values")
    return value


def _log(roots: Roots, kind: str, path: object, owner: int | None = None) -> int:
    """The log file `path` below the root `kind`, opened to append. The caller owns the directory,
    so it must be a regular file (a FIFO would hold the request until someone read it) of one link
    (another name may be /etc/passwd: fs.protected_hardlinks=0 lets anyone link any file), owned by
    `owner` if given; a missing one is made, `owner`'s. Checked before anything is written."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
    made = True
    try:
        fd = roots.open(kind, path, flags | os.O_CREAT | os.O_EXCL, 0o640)
    except Refused:  # there already, or not to be made: the plain open says why
        made, fd = False, roots.open(kind, path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise Refused(f"log: {path!r} is not a regular file of one link")
        if owner is not None and made:
            os.fchown(fd, owner, -1)
        elif owner is not None and st.st_uid != owner:
            raise Refused(f"log: {path!r} is not the service account's")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _apart(targets: list[str]) -> None:
    """Mount points none of which lies in another: bwrap makes a nested one inside the mount
    above it, following any link the job left there, as root."""
    for a, b in itertools.permutations(targets, 2):
        if a == b or b.startswith(a.rstrip("/") + "/"):
            raise Refused(f"{b!r} lies in {a!r}: the replica's directories must lie apart")


class Launcher:
    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}  # one per network namespace, for its setup
        self.ops: dict[str, Callable[[dict[str, Any]], object]] = {
            "status": self.status, "start_replica": self.start_replica, "stop_replica": self.stop_replica,
            "release_job": self.release_job, "share": self.share, "start_build": self.start_build,
            "release_build": self.release_build,
        }

    def handle(self, req: object) -> object:
        if not isinstance(req, dict) or req.get("op") not in self.ops:
            raise Refused(f"unknown request (known: {', '.join(sorted(self.ops))})")
        return self.ops[req["op"]](req)

    # --- checks ----------------------------------------------------------------------------
    def job_uid(self, req: dict[str, Any]) -> int:
        """The job uid a request names (rootless: the service's own, whatever it names)."""
        if self.setup.job_uids is None:
            return self.setup.service_uid
        return _int(req, "uid", self.setup.job_uids.start + 1, self.setup.job_uids.stop - 1)

    def _ns(self, key: str) -> str:
        return netns.name(self.setup.roots.paths["jobs"], key)

    def _lock(self, ns: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(ns, threading.Lock())

    def _network(self, ns: str, internet: bool) -> netns.Network:
        """The namespace `ns` (and its route out), made once however many replicas ask at a time."""
        with self._lock(ns):
            network = netns.ensure(self.setup.state_dir, ns)
            if internet:
                egress.start(network, self.setup.state_dir / "slirp4netns" / f"{ns}.pid")
        return network

    def _drop_network(self, ns: str) -> None:
        with self._lock(ns):
            egress.stop(self.setup.state_dir / "slirp4netns" / f"{ns}.pid")
            netns.remove(self.setup.state_dir, ns)

    # --- the vocabulary --------------------------------------------------------------------
    def status(self, req: dict[str, Any]) -> dict[str, Any]:
        support = cgroups.support()
        uids = self.setup.job_uids
        return {"rootless": self.setup.rootless, "sandbox": sandbox.probe(self.setup.rootless),
                "cgroups": {"version": support.version, "enforced": sorted(support.parents),
                            "missing": support.missing},
                "job_uids": [uids.start, uids.stop - 1] if uids else None}

    def share(self, req: dict[str, Any]) -> None:
        """Hand a home or a working copy to a job uid (ownership.share)."""
        uid = self.job_uid(req)
        kind = req.get("root")
        if kind not in ("pfs", "jobs"):
            raise Refused("root: pfs or jobs")
        fd = self.setup.roots.directory(kind, req.get("path"))
        try:
            if not self.setup.rootless:
                ownership.share(fd, uid, self.setup.service_uid)
        finally:
            os.close(fd)

    def start_replica(self, req: dict[str, Any]) -> None:
        job = _int(req, "job", 1, 2**62)
        replica = _text(req, "replica", REPLICA)
        uid = self.job_uid(req)
        internet = req.get("internet") is True
        limits = cgroups.Limits(memory_bytes=_int(req, "memory_bytes", 1 << 20, 1 << 50),
                                cpu_millis=_int(req, "cpu_millis", 1, 1 << 20), pids=_int(req, "pids", 16, 4_194_304))
        disk = _int(req, "disk_bytes", 1 << 20, 1 << 50)
        home_at, public_at = _inside_path(req, "home_at"), _inside_path(req, "public_at")
        argv, env = _strings(req.get("argv"), "argv"), _env(req.get("env"))
        hostname = _text(req, "hostname", HOSTNAME)
        username = _text(req, "username", NAME)
        grace = _int(req, "grace", 0, 3600)
        if sum(len(a) for a in argv) + sum(len(k) + len(v) for k, v in env.items()) > MAX_ARGS_BYTES:
            raise Refused("argv and env: at most 1 MiB in all")
        roots = self.setup.roots
        fds: list[int] = []

        def keep(fd: int) -> int:
            fds.append(fd)
            return fd

        try:
            state = keep(roots.directory("jobs", req.get("state")))
            log = keep(_log(roots, "logs", req.get("log"), self.setup.service_uid))
            work_path, tmp_path = req.get("work"), req.get("tmp")
            work, tmp = keep(roots.directory("jobs", work_path)), keep(roots.directory("jobs", tmp_path))
            spec = sandbox.Spec(uid, hostname, str(work_path), env, binds=[
                ("--bind", keep(roots.open("jobs", tmp_path)), "/tmp"),  # first: the others may lie below /tmp
                ("--ro-bind", keep(roots.open("venvs", req.get("venv"))), str(req.get("venv"))),
                ("--bind", keep(roots.open("jobs", work_path)), str(work_path)),
                ("--bind", keep(roots.open("pfs", req.get("home"))), home_at),
            ])
            with contextlib.suppress(Refused):  # no public area (yet)
                spec.binds.append(("--ro-bind", keep(roots.open("pfs", req.get("public"))), public_at))
            _apart([target for _, _, target in spec.binds[1:]])  # /tmp aside: emptied when a replica ends
            ns = self._ns(str(job))
            network = self._network(ns, internet)
            fds += network.fds
            inside_uid = sandbox.ROOTLESS_UID if self.setup.rootless else uid
            files = sandbox.account_files(inside_uid, username, home_at, hostname, RESOLV_CONF if internet else "")
            cgroup = cgroups.create(f"{ns}-{replica}", limits)
            self._keeper(req.get("state"), state, log, work, grace, fds, spec, files, network, argv, cgroup=cgroup,
                         disk=(disk, [work, tmp]), tmp=tmp)
        finally:
            for fd in fds:
                os.close(fd)

    def _keeper(self, label: object, state: int, log: int, cwd: int, grace: int, fds: list[int],
                spec: sandbox.Spec, files: dict[str, str], network: netns.Network, argv: list[str], *,
                cgroup: cgroups.Cgroup | None, disk: tuple[int, list[int]] | None, tmp: int | None) -> None:
        """Start a keeper running `argv` in the sandbox `spec`; returns once it has detached."""
        data = {target: sandbox.memfd("etc", text.encode()) for target, text in files.items()}
        data[sandbox.ENVIRON] = sandbox.memfd("environ", sandbox.environ(spec.env))
        filt = sandbox.seccomp_fd()
        fds += [*data.values(), filt]
        args = sandbox.args_fd(sandbox.options(spec, self.setup.rootless, data, filt))
        fds.append(args)
        passed = [args, filt, *data.values(), *spec.fds(), *network.fds]
        cmd = [sys.executable, "-I", "-S", str(KEEPER), "--label", str(label), "--state-fd", str(state),
               "--log-fd", str(log), "--cwd-fd", str(cwd), "--grace", str(grace), "--sandboxed",
               "--require", argv[0], *[a for fd in passed for a in ("--pass-fd", str(fd))]]
        if cgroup:
            cmd += [a for d in cgroup.dirs for a in ("--cgroup", str(d))]
            cmd += ["--oom-file", str(cgroup.oom_file)] if cgroup.oom_file else []
        if disk:
            cmd += ["--disk-limit", str(disk[0]), *[a for fd in disk[1] for a in ("--disk-fd", str(fd))]]
        if tmp is not None:
            cmd += ["--tmp-fd", str(tmp)]
        cmd += ["--", *sandbox.command(network.nsenter(), args, spec.uid, argv, self.setup.rootless)]
        done = subprocess.run(cmd, env=KEEPER_ENV, stdin=subprocess.DEVNULL, pass_fds=[state, log, cwd, *fds],
                              capture_output=True, text=True)
        if done.returncode:
            raise Refused(f"the keeper did not start: {done.stderr.strip()[-500:]}")

    def stop_replica(self, req: dict[str, Any]) -> bool:
        """SIGTERM to the keeper of the replica whose state directory is `state` (if it runs)."""
        label = req.get("state")
        state = self.setup.roots.directory("jobs", label)
        try:
            # The caller owns the state directory: a FIFO there would block the open, a huge file the read,
            # and a hard link to a root-only file would be read (and its number quoted back) as root.
            fd = os.open("keeper.pid", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=state)
            try:
                st = os.fstat(fd)
                keepers = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()
                pid = int(os.read(fd, 32).strip() or 0) if keepers else 0
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return False
        finally:
            os.close(state)
        try:
            # Held first, then checked: a signal through it never reaches a process that took the pid since.
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            owner = os.stat(f"/proc/{pid}").st_uid
            # Only a keeper this launcher started (its uid, its script, that label) is signalled.
            if owner != os.geteuid() or str(KEEPER).encode() not in cmdline or str(label).encode() not in cmdline:
                raise Refused(f"pid {pid} is not the keeper of {label}")
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        except OSError:
            return False  # ended meanwhile (the checks may have read a newer process: nothing was sent to it)
        finally:
            os.close(pidfd)
        return True

    def release_job(self, req: dict[str, Any]) -> None:
        """Drop what a job held: its route out, its network namespace, its replicas' cgroups."""
        ns = self._ns(str(_int(req, "job", 1, 2**62)))
        replicas = [r for r in _strings(req.get("replicas"), "replicas") if REPLICA.fullmatch(r)]
        self._drop_network(ns)
        for replica in replicas:
            cgroups.remove(f"{ns}-{replica}")

    # --- runtime builds --------------------------------------------------------------------
    def _build_ns(self, venv: str) -> str:
        return self._ns(f"b-{hashlib.sha256(venv.encode()).hexdigest()[:12]}")

    def _build_uid(self) -> int:
        return self.setup.job_uids.start if self.setup.job_uids else self.setup.service_uid

    def start_build(self, req: dict[str, Any]) -> None:
        """`pip install -r <venv>/requirements.txt` into the virtualenv `venv`, sandboxed as the build
        uid with only that virtualenv writable and a route out (never the host's loopback)."""
        roots, venv = self.setup.roots, req.get("venv")
        index_url = req.get("index_url")
        if index_url is not None and (not isinstance(index_url, str) or not re.fullmatch(r"\S{1,2000}", index_url)):
            raise Refused("index_url: a URL")
        fds: list[int] = []
        try:
            target = roots.directory("venvs", venv)
            fds.append(target)
            state = roots.directory("venvs", req.get("state"))
            fds.append(state)
            log_root = req.get("log_root", "venvs")  # a job's build log, or the runtime's own
            if log_root not in ("venvs", "logs"):
                raise Refused("log_root: venvs or logs")
            log = _log(roots, log_root, req.get("log"), self.setup.service_uid)
            fds.append(log)
            pip_env = sandbox.pip_environment()  # before the hand-over: a refusal leaves the venv as it was
            if not self.setup.rootless:
                ownership.give(target, self._build_uid())
            spec = sandbox.Spec(self._build_uid(), BUILD_HOSTNAME, "/tmp", {
                **pip_env, "PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
                "PIP_CONFIG_FILE": os.devnull}, tmpfs=["/tmp"])
            for path in sandbox.local_paths(list(pip_env.values())):
                if not path.startswith(("/usr/", "/etc/ssl/")):
                    spec.binds.append(("--ro-bind", path, path))
            spec.binds.append(("--bind", target, str(venv)))
            network = self._network(self._build_ns(str(venv)), internet=True)
            fds += network.fds
            files = {"/etc/hosts": f"127.0.0.1 localhost {BUILD_HOSTNAME}\n", "/etc/resolv.conf": RESOLV_CONF}
            argv = [f"{venv}/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                    "--progress-bar", "off", "-r", f"{venv}/requirements.txt"]
            argv += ["--index-url", index_url] if index_url else []
            self._keeper(req.get("state"), state, log, target, 10, fds, spec, files, network, argv, cgroup=None,
                         disk=None, tmp=None)
        finally:
            for fd in fds:
                os.close(fd)

    def release_build(self, req: dict[str, Any]) -> None:
        """After a build: its network goes, and the virtualenv is the service's (read-only to jobs)."""
        venv = req.get("venv")
        fd = self.setup.roots.directory("venvs", venv)
        try:
            ns = self._build_ns(str(venv))
            self._drop_network(ns)
            if not self.setup.rootless:
                ownership.give(fd, self.setup.service_uid)
        finally:
            os.close(fd)
