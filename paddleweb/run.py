"""`make run`: the whole service on this machine, one instance per state directory.

1. Takes an exclusive lock on `<PADDLECLOUD_VAR>/run.lock` for the life of the tree (every
   process of it inherits the locked descriptor), so a second `make run` on the same state
   directory stops at once with a clear message instead of starting a second Redis, worker and
   watcher over the first one's files.
2. Migrates, bootstraps and collects static files.
3. Runs the Procfile under honcho, whose rule is ours: when any process exits, every other is
   stopped and the run ends. So a dead launcher, worker, watcher, beat, Redis or web server is
   never left behind a half-alive service; this says so, and the operator starts it again.

Started as root, only the launcher (launcher/) keeps root: everything else, the steps of 2
included, runs as the service account (paddleweb/privileges.py). Started by a normal user, the
launcher runs rootless and local jobs are sandboxed with user namespaces.

(Why not restart in place: a crash loop would then hide behind a service that looks up; the
health endpoint and the probes cover long-running deployments, which run each part apart.)
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from launcher.paths import Refused, open_real_dir

from . import privileges


def _lock(path: str) -> int | None:
    """The locked descriptor, or None when another run holds the lock. Never through a link, nor
    a file of other names: the service account, which owns the state directory, could otherwise
    have the next start as root truncate any file."""
    refused = SystemExit(f"paddlecloud: {path} is not a plain file of its own; remove it and start again.")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link
            raise refused from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise refused
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    os.set_inheritable(fd, True)  # held while any process of the tree lives
    return fd


def _holder(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"


def _as_service_account(settings: Any, env: dict[str, str]) -> list[str]:
    """Make the state directory the service account's; the command prefix that drops to it."""
    user = privileges.account(settings.SERVICE_USER, settings.VAR_DIR)
    privileges.hand_over(settings.VAR_DIR, user)
    for root in (settings.PFS_ROOT, settings.JOBS_ROOT, settings.LOGS_ROOT, settings.VENVS_ROOT):
        try:  # made and handed over through no link: the account may have left one there
            fd = open_real_dir(str(root), os.O_RDONLY, make=True)
        except Refused as e:
            raise SystemExit(f"paddlecloud: not starting: {e}") from None
        try:
            if os.fstat(fd).st_uid == 0:
                os.fchown(fd, user.pw_uid, user.pw_gid)
        finally:
            os.close(fd)
    privileges.let_through(user, [Path(sys.executable).resolve(), Path(sys.prefix), settings.BASE_DIR,
                                  settings.VAR_DIR])
    drop = privileges.drop_command(user)
    env.update(PADDLECLOUD_AS=shlex.join(drop), HOME=str(settings.VAR_DIR))
    print(f"paddlecloud: running as {user.pw_name!r} (uid {user.pw_uid}); only the launcher keeps root", flush=True)
    return drop


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")
    from django.conf import settings

    lock_path = str(settings.VAR_DIR / "run.lock")
    fd = _lock(lock_path)
    if fd is None:
        print(f"paddlecloud: another `make run` (pid {_holder(lock_path)}) is already running on "
              f"{settings.VAR_DIR}; stop it first, or set PADDLECLOUD_VAR to another state directory.",
              file=sys.stderr, flush=True)
        return 1
    python, bin_dir = sys.executable, os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}  # the Procfile's commands
    drop: list[str] = []
    if os.geteuid() == 0:
        drop = _as_service_account(settings, env)
    for step in (["migrate", "--noinput", "-v0"], ["bootstrap"], ["collectstatic", "--noinput", "-v0"]):
        if subprocess.call([*drop, python, "manage.py", *step], cwd=settings.BASE_DIR, env=env, pass_fds=(fd,)) != 0:
            print(f"paddlecloud: `manage.py {step[0]}` failed; not starting.", file=sys.stderr, flush=True)
            return 1
    honcho = subprocess.Popen([os.path.join(bin_dir, "honcho"), "start"], cwd=settings.BASE_DIR, env=env,
                              pass_fds=(fd,))
    # Ctrl-C reaches honcho too (same process group): it stops the tree, and we report.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *a: honcho.send_signal(signal.SIGTERM))
    rc = honcho.wait()
    if rc in (130, 143):  # honcho's codes for a stop it was asked for (SIGINT, SIGTERM)
        print("paddlecloud: stopped.", flush=True)
        return 0
    print(f"paddlecloud: a process of the service exited (the first 'stopped (rc=…)' line above says which), "
          f"so every other one was stopped too, rather than leaving the service half-running. "
          f"Run `make run` again to start it (honcho exited with {rc}).", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
