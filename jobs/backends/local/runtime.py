"""Runtime environments for local jobs: a virtualenv per distinct requirements.txt, cached.

The key is a hash of the interpreter version and the requirements text, so paddlepaddle is
installed once and every later job with the same requirements reuses it. Builds are serialised
by a file lock; a build that died half-way (no `.ready` marker) is thrown away and redone.

`pip install` runs the setup scripts of packages the user chose, so with the datacenter's
isolation on it runs sandboxed like a job (sandbox.py): as the build uid,
with only the virtualenv being built writable and a route out through slirp4netns that never
reaches the host's loopback (the service's Redis, database and web server).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from . import egress, netns, sandbox

READY = ".ready"


class RuntimeEnvError(Exception):
    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.message = message
        self.log_tail = log_tail


def env_key(requirements: str) -> str:
    lines = sorted(line.strip() for line in requirements.splitlines() if line.strip() and not line.startswith("#"))
    data = f"{sys.version_info[:3]}\n" + "\n".join(lines)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def env_dir(requirements: str) -> Path:
    return settings.VENVS_ROOT / env_key(requirements)


def ensure_env(requirements: str, heartbeat: Callable[[], None] = lambda: None, *, sandboxed: bool = True) -> Path:
    """The bin/ directory of a ready virtualenv with `requirements` installed."""
    target = env_dir(requirements)
    if (target / READY).exists():
        return target / "bin"
    settings.VENVS_ROOT.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        while True:  # wait for another builder of the same env, showing we are alive
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                heartbeat()
                time.sleep(1)
        if not (target / READY).exists():
            shutil.rmtree(target, ignore_errors=True)
            _build(target, requirements, heartbeat, sandboxed)
    return target / "bin"


@contextmanager
def _isolated(target: Path, sandboxed: bool) -> Iterator[Callable[[list[str]], list[str]]]:
    """Yields what turns the pip command into its sandboxed form (or leaves it, isolation off)."""
    if not sandboxed:
        yield lambda cmd: cmd
        return
    ns_name = f"pc-b-{hashlib.sha256(str(target).encode()).hexdigest()[:12]}"
    etc, pid_file = Path(f"{target}.etc"), Path(f"{target}.slirp4netns.pid")
    try:
        try:
            ns = netns.ensure(ns_name)
            egress.start(ns, pid_file)
        except OSError as e:
            raise RuntimeEnvError("the sandbox for pip install cannot start (its route out needs slirp4netns: "
                                  "`sudo apt-get install slirp4netns`)", str(e)) from e
        sandbox.write_build_etc(etc, egress.RESOLV_CONF)
        sandbox.give_to(target, settings.JOB_UID_BASE)
        env = sandbox.pip_environment()
        yield lambda cmd: sandbox.build_command(target, etc, env, ns, cmd)
    finally:
        egress.stop(pid_file)
        netns.remove(ns_name)
        shutil.rmtree(etc, ignore_errors=True)
        if target.exists():
            sandbox.give_to(target, 0)  # ready, nothing of it stays writable by the build uid


def _build(target: Path, requirements: str, heartbeat: Callable[[], None], sandboxed: bool) -> None:
    log_path = Path(f"{target}.log")
    # A plain venv, with the pip and setuptools that training programs expect (paddle imports
    # setuptools); ensurepip bundles them, so this needs no network.
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    if requirements.strip():
        req = target / "requirements.txt"
        req.write_text(requirements)
        cmd = [str(target / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
               "--progress-bar", "off", "-r", str(req)]
        if settings.PIP_INDEX_URL:
            cmd += ["--index-url", settings.PIP_INDEX_URL]
        with open(log_path, "wb") as log, _isolated(target, sandboxed) as wrap:
            proc = subprocess.Popen(wrap(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            while proc.poll() is None:
                heartbeat()
                time.sleep(1)
        if proc.returncode != 0:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-25:]
            shutil.rmtree(target, ignore_errors=True)
            raise RuntimeEnvError(f"pip install -r requirements.txt failed with code {proc.returncode}",
                                  "\n".join(tail))
    (target / READY).touch()
