"""Helpers for tests that run real replica processes."""

import time

import psutil

from jobs.backends.local import SHIM
from jobs.models import Job


def wait_for(predicate, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job_processes(job: Job) -> list[psutil.Process]:
    """Every live process belonging to the job: its keepers and anything they started."""
    from django.conf import settings

    root = str(settings.JOBS_ROOT / str(job.pk))
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            cwd = proc.info["cwd"] or ""
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if (str(SHIM) in cmdline and root in cmdline) or cwd.startswith(root):
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def wait_state(job: Job, states, timeout=60.0) -> Job:
    states = [states] if isinstance(states, str) else states

    def check():
        job.refresh_from_db()
        return job.state in states

    wait_for(check, timeout, what=f"job {job.name} to reach {states} (now {job.state}: {job.message[-500:]})")
    return job
