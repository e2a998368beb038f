"""`python -m launcher`: see __init__.py. Started as root (or rootless) before the service."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
import threading
from pathlib import Path

from . import cgroups, sandbox, uids
from .ops import Launcher, Setup
from .paths import Refused, Roots
from .server import Server

log = logging.getLogger("launcher")
PROTECTED_HARDLINKS = Path("/proc/sys/fs/protected_hardlinks")


def check_hardlinks() -> None:
    """As root, only where nobody can hard-link a file they cannot write (fs.protected_hardlinks=1).
    The per-file checks (one link, by descriptor: ops._log, ownership) cannot be airtight without
    it: a file held open whose one link is left may be /etc/shadow, its link in the tree removed
    meanwhile; and the keeper writes its state files by name in the service's directory.
    (protected_symlinks matters to none of it: no link is followed where another uid writes.)"""
    setting = PROTECTED_HARDLINKS
    try:
        value = setting.read_text().strip()
    except OSError as e:
        raise Refused(f"cannot read {setting}: {e.strerror}") from None
    if value != "1":
        raise Refused(f"{setting} is {value}, not 1: the service account could hard-link /etc/shadow into "
                      f"a directory of its own for root to write (sysctl -w fs.protected_hardlinks=1)")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m launcher", description=__doc__)
    p.add_argument("--socket", required=True)
    p.add_argument("--state-dir", required=True, help="the launcher's own files (root-owned when root)")
    p.add_argument("--service-uid", type=int, default=os.geteuid(), help="the only uid that may ask")
    for root in ("pfs", "jobs", "logs", "venvs"):
        p.add_argument(f"--{root}-root", required=True)
    p.add_argument("--job-uids", default=uids.DEFAULT, help="FIRST-LAST (as root)")
    p.add_argument("--uid-registry", default=str(uids.REGISTRY))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="launcher: %(levelname)s %(message)s", stream=sys.stderr)
    args = parse(sys.argv[1:] if argv is None else argv)
    rootless = os.geteuid() != 0
    job_uids = None
    try:
        if not rootless:
            check_hardlinks()
            job_uids = uids.parse(args.job_uids)
            uids.check_host(job_uids)
            if args.service_uid in job_uids:
                raise Refused(f"the service account's uid {args.service_uid} is in JOB_UIDS")
            uids.hold(job_uids, Path(args.uid_registry))  # held until this process ends
        state = Path(args.state_dir)
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = state.lstat()  # root acts on the pid files in it: nobody else may write there
        if not rootless and (not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022):
            raise Refused(f"--state-dir {state}: not a directory of root's that only root may write")
        roots = Roots(pfs=args.pfs_root, jobs=args.jobs_root, logs=args.logs_root, venvs=args.venvs_root)
    except (Refused, OSError) as e:
        log.error("not starting: %s", e)
        return 2
    setup = Setup(roots, state, args.service_uid, job_uids, rootless)
    why = sandbox.probe(rootless)
    mode = "rootless (user namespaces; jobs run as the service's uid)" if rootless else \
        f"as root (jobs run as uids {job_uids.start + 1}-{job_uids.stop - 1})" if job_uids else ""
    log.info("%s, for uid %d, on %s", mode, args.service_uid, args.socket)
    if why:
        log.warning("local jobs cannot be sandboxed here, so they fail (SandboxUnavailable): %s", why)
    cgroups.support()  # logs what it cannot enforce
    if args.service_uid == 0 and not rootless:
        log.warning("the service itself runs as root: start it as root through `make run` to run it as its account")
    server = Server(args.socket, Launcher(setup), args.service_uid)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
