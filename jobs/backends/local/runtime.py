"""Runtime environments for local jobs: a virtualenv per distinct requirements.txt, cached.

The key is a hash of the interpreter version and the requirements text, so paddlepaddle is
installed once and every later job with the same requirements reuses it. Builds are serialised
by a file lock; a build that died half-way (no `.ready` marker) is thrown away and redone.

`pip install` runs the setup scripts of packages the user chose, so with the datacenter's
isolation on it runs sandboxed like a job, started by the launcher (launcher/, `start_build`): as
the build uid, with only the virtualenv being built writable and a route out through slirp4netns
that never reaches the host's loopback (the service's Redis, database and web server). Its keeper
records the exit in `<env>.state/`, pip's output goes to `<env>.log`; afterwards the virtualenv
is the service's again, read-only to jobs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from launcher import fdtree

from . import keepers
from .launcher_client import LauncherError, ask

READY = ".ready"
# How much of a failed build's log is read for its last lines.
MAX_TAIL_BYTES = 1 << 20


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


def ensure_env(requirements: str, heartbeat: Callable[[], None] = lambda: None, *, sandboxed: bool = True,
               log: Path | None = None, say: Callable[[str], object] = lambda line: None) -> Path:
    """The bin/ directory of a ready virtualenv with `requirements` installed. pip's output goes
    to `log` (a job's build log) or else `<env>.log`; `say` gets a line of ours at each step."""
    target = env_dir(requirements)
    if _ready(target):
        say(f"runtime {target.name} is ready (built before): nothing to install")
        return target / "bin"
    settings.VENVS_ROOT.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        waiting = False
        while True:  # wait for another builder of the same env, showing we are alive
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:
                    say(f"waiting for another job's build of runtime {target.name}")
                    waiting = True
                heartbeat()
                time.sleep(1)
        if _ready(target):
            say(f"runtime {target.name} is ready")
        else:
            fdtree.rmtree(target)
            say(f"building runtime {target.name}: pip install -r requirements.txt")
            _build(target, requirements, heartbeat, sandboxed, log or Path(f"{target}.log"))
            say(f"runtime {target.name} is ready")
    return target / "bin"


def _sandboxed_pip(target: Path, log_path: Path, heartbeat: Callable[[], None]) -> int:
    """pip install in the launcher's build sandbox; its exit code."""
    state = Path(f"{target}.state")
    fdtree.rmtree(state)
    state.mkdir()
    try:
        log_root = "venvs" if log_path.is_relative_to(settings.VENVS_ROOT) else "logs"
        ask("start_build", venv=str(target), state=str(state), log=str(log_path), log_root=log_root,
            index_url=settings.PIP_INDEX_URL or None)
        started = time.monotonic()
        while (done := keepers.read(state / "exit.json")) is None:
            # The keeper writes its pid just after the launcher answers: wait for it, then for its end.
            if not keepers.live(state) and keepers.read(state / "exit.json") is None \
                    and ((state / "keeper.pid").exists() or time.monotonic() - started > 10):
                return -1  # the keeper died without a word
            heartbeat()
            time.sleep(0.2)
        code: int = json.loads(done)["exit_code"]
        return code
    except LauncherError as e:
        raise RuntimeEnvError("the sandbox for pip install cannot start", str(e)) from e
    finally:
        # Not started, or the launcher is gone: nothing of the build is left to release
        with contextlib.suppress(LauncherError):
            ask("release_build", venv=str(target))
        fdtree.rmtree(state)


def _build(target: Path, requirements: str, heartbeat: Callable[[], None], sandboxed: bool, log_path: Path) -> None:
    # A plain venv, with the pip and setuptools that training programs expect (paddle imports
    # setuptools); ensurepip bundles them, so this needs no network.
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    if requirements.strip():
        (target / "requirements.txt").write_text(requirements)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        start = log_path.stat().st_size if log_path.exists() else 0
        if sandboxed:
            code = _sandboxed_pip(target, log_path, heartbeat)
        else:
            cmd = [str(target / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                   "--no-input", "--progress-bar", "off", "-r", str(target / "requirements.txt")]
            if settings.PIP_INDEX_URL:
                cmd += ["--index-url", settings.PIP_INDEX_URL]
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                while proc.poll() is None:
                    heartbeat()
                    time.sleep(1)
            code = proc.returncode
        if code != 0:
            tail = build_log_tail(log_path, start)
            fdtree.rmtree(target)
            raise RuntimeEnvError(f"pip install -r requirements.txt failed with code {code}", tail)
    _mark_ready(target)


def _ready(target: Path) -> bool:
    """Whether the marker is there, as a file of ours: a link a build left is not one."""
    try:
        return stat.S_ISREG(os.lstat(target / READY).st_mode)
    except OSError:
        return False


def _mark_ready(target: Path) -> None:
    """The build's setup scripts wrote the virtualenv: whatever they left at the marker's name
    (a link to another user's home, say) is removed and a new file made, never written through."""
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fdtree.remove(READY, fd)
        os.close(os.open(READY, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=fd))
    finally:
        os.close(fd)


def build_log_tail(log_path: Path, start: int, lines: int = 25) -> str:
    """The last `lines` lines of the build log from `start` (pip's own, not what came before), read
    from at most its last MAX_TAIL_BYTES: a package's setup script can write gigabytes there."""
    with open(log_path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(max(start, end - MAX_TAIL_BYTES))
        data = f.read(MAX_TAIL_BYTES)
    return "\n".join(data.decode(errors="replace").strip().splitlines()[-lines:])
