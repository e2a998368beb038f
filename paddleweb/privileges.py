"""`make run` started as root: everything but the launcher runs as the service account.

The account (SERVICE_USER, default `paddlecloud`) is made if the host has none, as a system
account with no login. The state directory becomes its own: on the first such start, what root
left there from an earlier run is handed over (files of job uids stay theirs). Where the code or
the interpreter lies below a directory the account cannot pass (a checkout in /root, pyenv's
Python), the account gets leave to pass through it and no more: a POSIX ACL entry with `x`
alone, said in the log. The processes then start through setpriv with no capabilities at all.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

NOLOGIN = "/usr/sbin/nologin"


def account(name: str, home: Path) -> pwd.struct_passwd:
    """The service account, made if missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", str(home),
                    "--shell", NOLOGIN, name], check=True)
    print(f"paddlecloud: made the service account {name!r} (a system account with no login)", flush=True)
    return pwd.getpwnam(name)


def hand_over(var: Path, user: pwd.struct_passwd) -> None:
    """Make the state directory the account's; the first time, what root left there too."""
    first = os.stat(var).st_uid != user.pw_uid
    os.chown(var, user.pw_uid, user.pw_gid)
    if not first:
        return
    from launcher import fdtree  # not os.fwalk: it recurses per level, and a job's tree nests deeper

    top = os.open(var, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for _path, dirfd, dirnames, filenames in fdtree.walk(top):
            for name in dirnames + filenames:
                try:
                    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                # A file of more than one name may be linked in from outside (a job's hard link
                # to a file of root's): its owner is left as it is.
                if st.st_uid == 0 and (stat.S_ISDIR(st.st_mode) or st.st_nlink == 1):
                    os.chown(name, user.pw_uid, user.pw_gid, dir_fd=dirfd, follow_symlinks=False)
    except fdtree.Moved as e:  # a running job (keepers outlive restarts) moved its directories about
        print(f"paddlecloud: {var} was not all handed over to {user.pw_name!r}: {e}", flush=True)
    finally:
        os.close(top)


def _blocked(user: pwd.struct_passwd, paths: list[Path]) -> Path | None:
    """The first directory on the way to one of `paths` that the account cannot pass."""
    candidates = [str(a) for p in paths for a in [*reversed(p.parents), p]]
    done = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "sh", "-c",
                           'for p; do [ -e "$p" ] || { echo "$p"; exit; }; done', "sh", *candidates],
                          capture_output=True, text=True)
    found = done.stdout.strip()
    return Path(found).parent if found else None


def let_through(user: pwd.struct_passwd, paths: list[Path]) -> None:
    """Let the account pass every directory on the way to `paths` (x only, by ACL)."""
    while (blocking := _blocked(user, paths)) is not None:
        if not shutil.which("setfacl"):
            sys.exit(f"paddlecloud: the service account {user.pw_name!r} cannot reach {blocking}; install `acl` "
                     f"(apt-get install acl) to let it pass, or keep the code and Python where it can")
        subprocess.run(["setfacl", "-m", f"u:{user.pw_name}:x", str(blocking)], check=True)
        print(f"paddlecloud: let {user.pw_name!r} pass through {blocking} (x only, by ACL)", flush=True)


def drop_command(user: pwd.struct_passwd) -> list[str]:
    """The prefix that runs a command as the account with no capabilities (setpriv, util-linux)."""
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--"]
