"""A job's checkpoint directory (PADDLE_CHECKPOINT_DIR, jobs/<name>/checkpoints in its user's home)
outlives the job on purpose: a job submitted again under that name resumes from it. So whoever
deletes a job is told it stays and may delete it too, and a new job that finds one says so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pfs import services as pfs
from pfs.paths import PathError

from .backends.base import checkpoint_path

if TYPE_CHECKING:
    from .models import Job

FOUND = "CheckpointsFound"  # the reason of the event a job gets when it is submitted onto checkpoints


def where(job: Job) -> str:
    """The directory as the user sees it (/pfs/<dc>/home/<user>/jobs/<name>/checkpoints)."""
    return checkpoint_path(job).virtual


def found(job: Job) -> bool:
    """Whether the job's checkpoint directory holds anything (read race-free through pfs)."""
    try:
        return pfs.stat(job.user, where(job)).is_dir and bool(pfs.listdir(job.user, where(job)))
    except PathError:
        return False


def found_message(job: Job) -> str:
    return (f"{where(job)} holds checkpoints of an earlier job named {job.name}: a program that resumes from "
            "PADDLE_CHECKPOINT_DIR continues from them (delete them to train from the start)")


def remove(job: Job) -> int:
    """Delete the job's checkpoint directory; the bytes freed (0 when there was none)."""
    try:
        return pfs.remove(job.user, where(job), recursive=True)
    except PathError as e:
        if e.status == 404:
            return 0
        raise
