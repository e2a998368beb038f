"""Storage usage per home, kept current by every write and delete, and the quota check.

Usage counts the apparent size of regular files in a home (what `ls -l` shows), excluding the
hidden `.uploads` area: unfinished uploads are counted as reservations instead, so two uploads
racing for the last bytes of a quota cannot both be accepted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Datacenter
from quotas.services import effective_quota
from quotas.units import format_bytes

from .models import StorageUsage, UploadSession
from .paths import RESERVED_NAME, PathError, PfsPath


class QuotaExceeded(PathError):
    def __init__(self, used: int, limit: int):
        super().__init__(f"quota exceeded: used {format_bytes(used)} of {format_bytes(limit)}", 413)
        self.used, self.limit = used, limit


@dataclass(frozen=True)
class Usage:
    used_bytes: int
    reserved_bytes: int  # declared sizes of unfinished uploads
    limit_bytes: int

    @property
    def free_bytes(self) -> int:
        return max(0, self.limit_bytes - self.used_bytes - self.reserved_bytes)


def tree_size(path: Path) -> int:
    """Bytes of the regular files at or below `path`; symbolic links are not followed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_size if not os.path.islink(path) else 0
    total = 0
    stack = [str(path)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:
                        continue
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
    return total


def home_size(home_dir: Path) -> int:
    total = 0
    try:
        with os.scandir(home_dir) as it:
            for entry in it:
                if entry.name != RESERVED_NAME:
                    total += tree_size(Path(entry.path))
    except FileNotFoundError:
        return 0
    return total


def _datacenter(name: str) -> Datacenter:
    return Datacenter.objects.only("id", "name").get(name=name)


def _home_dir(user, datacenter: Datacenter) -> Path:
    return PfsPath(datacenter.name, "home", user.get_username(), ()).disk


def _row(user, datacenter: Datacenter) -> StorageUsage:
    """The usage row, made with one walk of the home the first time it is needed."""
    row = StorageUsage.objects.filter(user=user, datacenter=datacenter).first()
    if row is not None:
        return row
    try:
        with transaction.atomic():
            return StorageUsage.objects.create(user=user, datacenter=datacenter,
                                               used_bytes=home_size(_home_dir(user, datacenter)),
                                               recomputed=timezone.now())
    except IntegrityError:
        return StorageUsage.objects.get(user=user, datacenter=datacenter)


def reserved_bytes(user, datacenter: Datacenter, *, exclude=None) -> int:
    from .uploads import part_size

    total = 0
    sessions = UploadSession.objects.filter(user=user, datacenter=datacenter)
    if exclude is not None:
        sessions = sessions.exclude(pk=exclude)
    for s in sessions:
        total += max(0, s.size - part_size(s))
    return total


def get_usage(user, datacenter: Datacenter | str) -> Usage:
    dc = _datacenter(datacenter) if isinstance(datacenter, str) else datacenter
    row = _row(user, dc)
    limit = effective_quota(user, dc).storage_bytes
    return Usage(max(0, row.used_bytes), reserved_bytes(user, dc), limit)


def check_room(target: PfsPath, new_bytes: int, *, replaced_bytes: int = 0, exclude_upload=None) -> None:
    """Refuse (QuotaExceeded) when writing `new_bytes` at `target`, replacing `replaced_bytes`,
    would take the home's owner over quota. Writes to public are not counted."""
    if target.area != "home" or new_bytes <= replaced_bytes:
        return
    user = get_user_model().objects.get(username=target.owner)
    dc = _datacenter(target.datacenter)
    used = max(0, _row(user, dc).used_bytes) + reserved_bytes(user, dc, exclude=exclude_upload)
    limit = effective_quota(user, dc).storage_bytes
    if used + new_bytes - replaced_bytes > limit:
        raise QuotaExceeded(used, limit)


def adjust(target: PfsPath, delta: int) -> None:
    """Add `delta` bytes to the usage of the home `target` is in (no-op for public)."""
    if target.area != "home" or delta == 0:
        return
    user = get_user_model().objects.get(username=target.owner)
    dc = _datacenter(target.datacenter)
    row = _row(user, dc)
    StorageUsage.objects.filter(pk=row.pk).update(used_bytes=F("used_bytes") + delta)


def recompute(user, datacenter: Datacenter) -> int:
    """Walk the home once and store the true usage (for what jobs wrote directly)."""
    size = home_size(_home_dir(user, datacenter))
    row = _row(user, datacenter)
    StorageUsage.objects.filter(pk=row.pk).update(used_bytes=size, recomputed=timezone.now())
    return size


def recompute_all() -> int:
    """Recompute every home that exists on disk or has a usage row; returns how many."""
    from django.conf import settings

    User = get_user_model()
    count = 0
    for dc in Datacenter.objects.only("id", "name"):
        homes = settings.PFS_ROOT / dc.name / "home"
        names = {p.name for p in homes.iterdir() if p.is_dir()} if homes.is_dir() else set()
        names |= set(StorageUsage.objects.filter(datacenter=dc).values_list("user__username", flat=True))
        for user in User.objects.filter(username__in=names):
            recompute(user, dc)
            count += 1
    return count
