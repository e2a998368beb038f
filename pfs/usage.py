"""Storage usage per home, the quota check, and reservations for writes in progress. Above
pfs.storage (the I/O, which measures trees for it) and below the services that write.

Usage counts the apparent size of the regular files in a home (what `ls -l` shows), each file
once however many hard links it has (partial data lies outside homes). A write first
reserves the bytes it will add (`reserve`), under a lock on the owner's StorageUsage row
(SELECT ... FOR UPDATE on PostgreSQL; on SQLite every transaction is IMMEDIATE, see
paddleweb/settings.py, so writers queue): the check `used + reserved + new <= limit` and the
reservation happen at once, so writers racing for the last bytes of a quota cannot all pass.
A write that does not know its size grows its reservation as the bytes come (archives, copies,
streams), and stops at the quota. When it ends the reservation is settled into `used_bytes`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from accounts.models import Datacenter
from quotas.services import effective_quota
from quotas.units import format_bytes

from .models import StorageReservation, StorageUsage, UploadSession
from .paths import PathError, PfsPath, open_beneath
from .storage import tree_size_fd

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)

# A reservation grows by at least this much at a time (fewer row locks per streamed write).
STEP = 4 << 20
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class QuotaExceeded(PathError):
    def __init__(self, used: int, limit: int):
        super().__init__(f"quota exceeded: used {format_bytes(used)} of {format_bytes(limit)}", 413)
        self.used, self.limit = used, limit


@dataclass(frozen=True)
class Usage:
    used_bytes: int
    reserved_bytes: int  # writes in progress and unfinished resumable uploads
    limit_bytes: int

    @property
    def free_bytes(self) -> int:
        return max(0, self.limit_bytes - self.used_bytes - self.reserved_bytes)


def home_size(home: PfsPath) -> int:
    """One walk of the home, by descriptor from the home's root. The service's partial data is
    kept outside it (storage.scratch_fd) and covered by reservations, so all of it counts."""
    try:
        fd = open_beneath(home.root, (), _DIR)
    except FileNotFoundError:
        return 0
    try:
        return tree_size_fd(fd)
    finally:
        os.close(fd)


def _datacenter(name: str) -> Datacenter:
    return Datacenter.objects.only("id", "name").get(name=name)


def _home(user: User, datacenter: Datacenter) -> PfsPath:
    return PfsPath(datacenter.name, "home", user.get_username(), ())


def _row(user: User, datacenter: Datacenter, *, lock: bool = False) -> StorageUsage:
    """The usage row, made with one walk of the home the first time it is needed. With `lock`
    (inside a transaction) it stays locked until the transaction ends."""
    rows = StorageUsage.objects.select_for_update() if lock else StorageUsage.objects
    row = rows.filter(user=user, datacenter=datacenter).first()
    if row is not None:
        return row
    try:
        with transaction.atomic():
            StorageUsage.objects.create(user=user, datacenter=datacenter, used_bytes=home_size(_home(user, datacenter)),
                                        recomputed=timezone.now())
    except IntegrityError:
        pass  # made meanwhile by another request
    return rows.get(user=user, datacenter=datacenter)


def lock_row(user: User, datacenter: Datacenter) -> None:
    """Hold the user's usage row until the surrounding transaction ends, so that what is decided
    under it (how much a reservation needs) cannot race another such decision for the home."""
    _row(user, datacenter, lock=True)


def _reserved(user: User, datacenter: Datacenter, *, exclude: int | None = None) -> int:
    rows = StorageReservation.objects.filter(user=user, datacenter=datacenter)
    if exclude is not None:
        rows = rows.exclude(pk=exclude)
    return rows.aggregate(total=Sum("bytes"))["total"] or 0


def get_usage(user: User, datacenter: Datacenter | str) -> Usage:
    """The user's usage, reservations and limit in the datacenter (job admission calls this to
    refuse new jobs of an over-quota user)."""
    dc = _datacenter(datacenter) if isinstance(datacenter, str) else datacenter
    row = _row(user, dc)
    limit = effective_quota(user, dc).storage_bytes
    return Usage(max(0, row.used_bytes), _reserved(user, dc), limit)


class Reservation:
    """Bytes held for one write into `target`'s home (nothing is held for public). `ensure(n)`
    makes sure `n` bytes in all are held, growing the reservation under the row lock or raising
    QuotaExceeded; `settle(delta)` ends it, adding what the write really changed to the usage;
    `release()` (or leaving a `with` block unsettled) drops it. `charge(n)` counts `n` more
    bytes written and ensures them (`count` is the bytes charged so far)."""

    def __init__(self, target: PfsPath, *, upload: UploadSession | None = None):
        self.home = target.area == "home"
        self.held = self.count = 0
        self.pk: int | None = None
        self.upload = upload
        if self.home:
            self.user = get_user_model().objects.get(username=target.owner)
            self.dc = _datacenter(target.datacenter)

    def ensure(self, total: int, *, ahead: bool = False) -> None:
        """Hold `total` bytes in all; with `ahead` (a stream of unknown length), up to STEP more
        where they fit, so the next chunks need no lock."""
        if not self.home or (self.pk is not None and total <= self.held):
            return
        with transaction.atomic():
            row = _row(self.user, self.dc, lock=True)
            used = max(0, row.used_bytes) + _reserved(self.user, self.dc, exclude=self.pk)
            limit = effective_quota(self.user, self.dc).storage_bytes
            if used + max(0, total) > limit:
                raise QuotaExceeded(used + self.held, limit)
            grant = min(max(total, self.held + STEP), limit - used) if ahead else max(0, total)
            if self.pk is None:
                self.pk = StorageReservation.objects.create(user=self.user, datacenter=self.dc, upload=self.upload,
                                                            bytes=grant).pk
            else:
                StorageReservation.objects.filter(pk=self.pk).update(bytes=grant, updated=timezone.now())
            self.held = grant

    def charge(self, n: int) -> None:
        self.count += n
        self.ensure(self.count, ahead=True)

    def settle(self, delta: int) -> None:
        """The write is done and changed the home by `delta` bytes: count them, free the rest."""
        if not self.home:
            return
        with transaction.atomic():
            if self.pk is not None:
                StorageReservation.objects.filter(pk=self.pk).delete()
            _add(self.user, self.dc, delta)
        self.pk, self.held = None, 0

    def release(self) -> None:
        if self.home and self.pk is not None:
            StorageReservation.objects.filter(pk=self.pk).delete()
        self.pk, self.held = None, 0

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def reserve(target: PfsPath, nbytes: int, *, upload: UploadSession | None = None) -> Reservation:
    """A reservation of `nbytes` for a write into `target`'s home. Refused (QuotaExceeded) when
    it does not fit, or when the owner is over quota already, even for 0 bytes."""
    r = Reservation(target, upload=upload)
    r.count = nbytes
    r.ensure(nbytes)
    return r


def reservation_of(upload: UploadSession, target: PfsPath) -> Reservation:
    """The reservation a resumable upload made when it was created."""
    r = Reservation(target, upload=upload)
    row = StorageReservation.objects.filter(upload=upload).first()
    if row is not None:
        r.pk, r.held = row.pk, row.bytes
    return r


def _add(user: User, dc: Datacenter, delta: int) -> None:
    row = _row(user, dc)
    grown = F("grown_bytes") + max(0, delta)
    StorageUsage.objects.filter(pk=row.pk).update(used_bytes=F("used_bytes") + delta, grown_bytes=grown)


def adjust(target: PfsPath, delta: int) -> None:
    """Add `delta` bytes to the usage of the home `target` is in (no-op for public); for changes
    that need no room (removals, moves within a home)."""
    if target.area != "home" or delta == 0:
        return
    _add(get_user_model().objects.get(username=target.owner), _datacenter(target.datacenter), delta)


def recompute(user: User, datacenter: Datacenter) -> int:
    """Walk the home once and store the true usage (what jobs wrote directly counts too). What
    grew while the walk ran is added on top: the walk may have passed it by (counting it twice
    until the next walk errs on the safe side)."""
    grown_before = _row(user, datacenter).grown_bytes
    size = home_size(_home(user, datacenter))
    with transaction.atomic():
        row = _row(user, datacenter, lock=True)
        size += row.grown_bytes - grown_before
        StorageUsage.objects.filter(pk=row.pk).update(used_bytes=size, recomputed=timezone.now())
    return size


def drop_stale_reservations() -> int:
    """Reservations of transient writes whose process died (no growth for settings.PFS_RESERVATION_TTL)."""
    cutoff = timezone.now() - settings.PFS_RESERVATION_TTL
    return StorageReservation.objects.filter(upload=None, updated__lt=cutoff).delete()[0]


def recompute_all() -> int:
    """Recompute every home that exists on disk or has a usage row; returns how many were. One that
    fails is logged and skipped (it keeps its last count until a later pass succeeds)."""
    user_model = get_user_model()
    count = 0
    for dc in Datacenter.objects.only("id", "name"):
        homes = settings.PFS_ROOT / dc.name / "home"
        names = {p.name for p in homes.iterdir() if p.is_dir()} if homes.is_dir() else set()
        names |= set(StorageUsage.objects.filter(datacenter=dc).values_list("user__username", flat=True))
        for user in user_model.objects.filter(username__in=names):
            try:
                recompute(user, dc)
            except Exception:  # one home (a job shapes it freely) must not stop everyone else's recount
                log.exception("recounting %s's home in %s failed", user.get_username(), dc.name)
                continue
            count += 1
    return count
