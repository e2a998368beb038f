"""`python -m paddleweb.launcher`: the launcher (launcher/) for this install, as the Procfile runs it.

Reads the settings for the roots, the socket and the job uid range, then replaces itself with
`python -m launcher`, so no Django stays in the process that keeps root. As root it serves the
service account (SERVICE_USER, which `make run` makes); run by a normal user, that user.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import sys
from pathlib import Path

from launcher.paths import Refused, open_real_dir


def arguments(settings: object) -> list[str]:
    var: Path = settings.VAR_DIR  # type: ignore[attr-defined]
    if os.geteuid() == 0:  # root-owned, out of the service account's reach
        state = Path("/run/paddlecloud") / f"launcher-{hashlib.sha256(str(var).encode()).hexdigest()[:12]}"
    else:
        state = var / "launcher"
    return ["--socket", str(settings.LAUNCHER_SOCKET), "--state-dir", str(state),  # type: ignore[attr-defined]
            "--service-uid", str(pwd.getpwnam(settings.SERVICE_USER).pw_uid if os.geteuid() == 0 else os.geteuid()),  # type: ignore[attr-defined]
            "--job-uids", settings.JOB_UIDS,  # type: ignore[attr-defined]
            *[a for name in ("pfs", "jobs", "logs", "venvs")
              for a in (f"--{name}-root", str(getattr(settings, f"{name.upper()}_ROOT")))]]


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")
    from django.conf import settings

    for name in ("PFS_ROOT", "JOBS_ROOT", "LOGS_ROOT", "VENVS_ROOT"):
        try:  # as root: through no link the service account may have left (launcher.paths)
            os.close(open_real_dir(str(getattr(settings, name)), make=True))
        except Refused as e:
            sys.exit(f"launcher: not starting: {e}")
    args = arguments(settings)
    os.chdir(settings.BASE_DIR)
    os.execv(sys.executable, [sys.executable, "-m", "launcher", *args])


if __name__ == "__main__":
    main()
