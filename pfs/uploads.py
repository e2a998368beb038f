"""Resumable uploads (tus-like). See pfs/api/upload_views.py for the HTTP protocol.

An upload is created with its destination path and total size, and optionally the digest of
the whole file (sha256 or crc32c), or a promise of it (`sha256_later`, `crc32c_later`: it comes
in an `Upload-Sha256` or `Upload-Crc32c` header of a chunk, so the client can hash while it
sends); its quota is reserved then, so an upload that
would not fit is refused before any byte is written. Data goes to `<id>.part` in the home's
scratch directory (outside the home, out of jobs' reach: pfs.storage.scratch_fd), whose
length *is* the upload offset, so a crash or a dropped connection never loses track of what
arrived. Chunks are appended at an explicit offset (a mismatch answers 409 with the
current offset); when the last byte arrives the file is verified (size; digest as hashed while
the bytes arrived: pfs.upload_digest) and renamed atomically onto its destination. An upload
promised a digest that has all its bytes but no digest yet waits for a chunk (an empty one:
`Content-Length: 0`) that brings it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Datacenter

from . import upload_digest, usage
from .models import UploadSession, part_file_name
from .paths import HOME_SCRATCH, PUBLIC_SCRATCH, PathError, PfsPath, resolve
from .services import _refuse_root, counted_size, lstat_or_none, mkdir, put_in_place
from .storage import NEW_FILE, remove_at, scratch_fd
from .upload_headers import CHECKSUM_ALGORITHMS, DIGEST_FORMS, DIGEST_HEADERS, MAX_FILE_SIZE
from .upload_parts import area, open_part, part_name

if TYPE_CHECKING:
    from django.contrib.auth.models import User

BLOCK = 1 << 20


class OffsetConflict(PathError):
    def __init__(self, expected: int, got: int):
        super().__init__(f"the upload is at offset {expected}, not {got}: resume from {expected}", 409)
        self.offset = expected


def _dest(session: UploadSession) -> PfsPath:
    return resolve(session.user, session.path, write=True)


def create(user: User, path: str, size: int, *, sha256: str = "", sha256_later: bool = False,
           crc32c: str = "", crc32c_later: bool = False, overwrite: bool = True) -> UploadSession:
    """Start an upload of `size` bytes to `path`, its whole file checked by at most one of
    sha256 or crc32c (a hex digest now, or `*_later`). Its room in the quota is reserved now
    (for a replaced file, the difference, for one unfinished upload to the path at a time), so
    an upload that would not fit is refused at once, and one admitted keeps its room however
    many others race it."""
    if not isinstance(size, int) or not 0 <= size <= MAX_FILE_SIZE:
        raise PathError(f"size must be a whole number of bytes from 0 to {MAX_FILE_SIZE}")
    checks = {"sha256": ((sha256 or "").lower(), sha256_later), "crc32c": ((crc32c or "").lower(), crc32c_later)}
    asked = [(algo, digest, later) for algo, (digest, later) in checks.items() if digest or later]
    if len(asked) > 1 or any(digest and later for _, digest, later in asked):
        raise PathError("give one of sha256, sha256_later, crc32c or crc32c_later, not several")
    algorithm, digest, later = asked[0] if asked else ("", "", False)
    if digest and not DIGEST_FORMS[algorithm].match(digest):
        raise PathError(f"{algorithm} must be {64 if algorithm == 'sha256' else 8} hexadecimal digits")
    p = resolve(user, path, write=True)
    _refuse_root(p, "replaced")
    st = lstat_or_none(p)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise PathError(f"{p.virtual} is a directory", 409)
    if not overwrite and st is not None:
        raise PathError(f"{p.virtual} already exists (overwrite=true replaces it)", 409)
    cleanup_stale(user=user)
    dc = Datacenter.objects.only("id", "name").get(name=p.datacenter)
    with scratch_fd(p) as scratch:
        with transaction.atomic():
            usage.lock_row(user, dc)  # one create at a time: the replaced file's room is given once
            replaced = 0 if _unfinished_to(user, dc, p.virtual) else counted_size(st)
            session = UploadSession.objects.create(user=user, datacenter=dc, path=p.virtual, size=size,
                                                   digest_algorithm=algorithm, digest=digest,
                                                   digest_later=later, overwrite=overwrite)
            usage.reserve(p, size - replaced, upload=session)
        try:
            os.close(os.open(part_name(session), NEW_FILE, 0o600, dir_fd=scratch))
        except BaseException:
            session.delete()
            raise
    if size == 0:
        _complete(session)
    return session


def _unfinished_to(user: User, dc: Datacenter, path: str) -> bool:
    """Whether an unfinished upload to `path` exists: it holds the room of the file both replace."""
    return UploadSession.objects.filter(user=user, datacenter=dc, path=path, completed__isnull=True).exists()


def get(user: User, upload_id: str) -> UploadSession:
    """The user's upload (404 for anyone else's or an unknown id)."""
    try:
        key = uuid.UUID(str(upload_id))
        return UploadSession.objects.select_related("user").get(pk=key, user=user)
    except (UploadSession.DoesNotExist, ValueError):
        raise PathError("no such upload (it may have expired or been cancelled)", 404) from None


class ChunkWriter:
    """One chunk being appended to an upload at `offset`: opened (and checked) first, then fed
    blocks in order (`write`, from any thread), then `finish`ed or `abort`ed. `write_chunk` drives
    it from a blocking `read`; pfs.asgi_fast drives it straight from ASGI `receive()` messages.

    Opening checks, in this order: not already complete (409), destination path still allowed,
    `length` within settings.PFS_MAX_CHUNK when `bounded` (413), part file present (410), no
    other request writing it (409),
    `offset` equal to the data already there (409 with the offset), the chunk within the
    upload's declared size (413), `digest` (the whole file's (algorithm, hex), from
    `Upload-Sha256` or `Upload-Crc32c`) of the upload's algorithm (400) and not other than one
    given before (422). The part file is locked for the writer's lifetime.

    Where the upload has a whole-file digest to check (given or promised), `running` is its
    hash so far, fed every byte the writer stores (`write`; `stored` for bytes the server
    spliced into `fd`)."""

    def __init__(self, session: UploadSession, offset: int, length: int | None,
                 checksum: tuple[str, bytes] | None = None, *, bounded: bool = True,
                 digest: tuple[str, str] | None = None):
        if session.completed:
            raise OffsetConflict(session.size, offset)
        dest = _dest(session)  # the destination is checked again on every request
        if bounded and length is not None and length > settings.PFS_MAX_CHUNK:
            raise PathError(f"a chunk may be at most {settings.PFS_MAX_CHUNK} bytes; send the file in several", 413)
        try:
            fd = open_part(session, dest)
        except FileNotFoundError:
            if _completed(session):  # by a request that raced this one
                raise OffsetConflict(session.size, offset) from None
            raise PathError("the upload's data is gone (expired?): start a new upload", 410) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PathError("another request is writing to this upload right now", 409) from None
            if _completed(session):  # by the lock's last holder, after `session` was read
                raise OffsetConflict(session.size, offset)
            current = os.fstat(fd).st_size
            if offset != current:
                raise OffsetConflict(current, offset)
            if length is not None and offset + length > session.size:
                raise PathError(f"the chunk goes past the upload's size ({session.size} bytes)", 413)
            _note_digest(session, digest)
            self.running = (upload_digest.take(session.pk, session.digest_algorithm, fd, offset)
                            if session.digest_algorithm else None)
        except BaseException:
            os.close(fd)
            raise
        self.session, self.fd, self.start, self.pos, self.length = session, fd, offset, offset, length
        self.checksum = checksum
        self.hash = CHECKSUM_ALGORITHMS[checksum[0]]() if checksum else None
        self._follower: upload_digest.Follower | None = None  # hashing what `stored` reports

    def write(self, blocks: Iterable[bytes]) -> None:
        """Append `blocks` (bytes) in order with as few system calls as possible. A block of
        zeros becomes a hole (sparse files stay sparse); the part file's length stays equal to
        the bytes received, so the offset survives any crash or cut."""
        size = self.session.size
        run: list[bytes] = []
        run_at = self.pos
        try:
            for block in blocks:
                n = len(block)
                if not n:
                    continue
                if self.pos + n > size:
                    raise PathError(f"the chunk goes past the upload's size ({size} bytes)", 413)
                if self.hash is not None:
                    self.hash.update(block)
                if self.running is not None:
                    self.running.update(block)
                if block[0] == 0 and block[-1] == 0 and block[n // 2] == 0 and block.count(0) == n:
                    _pwritev(self.fd, run, run_at)
                    run = []
                    self.pos += n
                    run_at = self.pos
                    os.ftruncate(self.fd, self.pos)  # zeros: extend with a hole
                else:
                    run.append(block)
                    self.pos += n
        finally:
            _pwritev(self.fd, run, run_at)

    def stored(self, n: int) -> None:
        """`n` more bytes landed in `fd` after those hashed so far (the server's splice, from its
        thread, piece by piece): a follower thread reads them back while they are fresh in the
        page cache and feeds the running hash, so it is done soon after the last byte is."""
        if self.running is not None:
            if self._follower is None:
                self._follower = upload_digest.Follower(self.running, self.fd, self.pos)
            self._follower.landed(n)

    def _wait_for_hash(self) -> None:  # the running hash covers every byte stored once this returns
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.close()

    def advance(self, n: int) -> None:
        """Count `n` bytes that were written at `pos` straight into `fd` (by the server's splice)."""
        if self.pos + n > self.session.size:
            raise PathError(f"the chunk goes past the upload's size ({self.session.size} bytes)", 413)
        self.pos += n

    def finish(self) -> int:
        """Close the chunk: it must be whole (400 otherwise, keeping what arrived unless it has a
        checksum) and match its checksum (460, discarded). Completes the upload when its last
        byte is here. Returns the new offset."""
        try:
            if self.length is not None and self.pos - self.start < self.length:
                # The connection closed early: keep what arrived (the offset says how much).
                raise PathError(f"the request ended {self.length - (self.pos - self.start)} bytes early; "
                                f"resume from offset {self.pos}", 400)
            if self.hash is not None and self.checksum is not None and self.hash.digest() != self.checksum[1]:
                raise PathError("checksum mismatch: the chunk was discarded, send it again", 460)
            self._wait_for_hash()
        except BaseException:
            self.abort()
            raise
        if self.running is not None:
            upload_digest.keep(self.session.pk, self.pos, self.running)
        UploadSession.objects.filter(pk=self.session.pk).update(updated=timezone.now())
        try:
            if self.pos == self.session.size:
                _complete(self.session)  # still locked: a request racing this one is refused, not let in
        finally:
            os.close(self.fd)
            self.fd = -1
        return self.pos

    def abort(self) -> None:
        """Give up on the chunk: one with a checksum is all or nothing, so its bytes go."""
        if self.fd < 0:
            return
        with contextlib.suppress(Exception):  # the follower reads `fd`: done before it closes
            self._wait_for_hash()
        upload_digest.forget(self.session.pk)  # the next chunk reads what the file holds
        try:
            if self.hash is not None:
                os.ftruncate(self.fd, self.start)
        finally:
            os.close(self.fd)
            self.fd = -1


def _pwritev(fd: int, blocks: list[bytes], pos: int) -> None:
    """Write `blocks` contiguously at `pos` (several per system call; short writes resumed)."""
    i = 0
    while i < len(blocks):
        group = blocks[i:i + 512]  # stay under IOV_MAX
        want = sum(len(b) for b in group)
        done = os.pwritev(fd, group, pos)
        if done < want:  # rare for a regular file; finish this group block by block
            for b in group:
                view = memoryview(b)
                skip = min(done, len(view))
                done -= skip
                view, at = view[skip:], pos + skip
                while view:
                    n = os.pwrite(fd, view, at)
                    view, at = view[n:], at + n
                pos += len(b)
        else:
            pos += want
        i += 512


def write_chunk(session: UploadSession, offset: int, read: Callable[[int], bytes], length: int | None,
                checksum: tuple[str, bytes] | None = None, digest: tuple[str, str] | None = None) -> int:
    """Append the bytes `read` yields at `offset`; returns the new offset. Completes the upload
    when the last byte arrives. `read(n)` returns at most n bytes, b"" at the end."""
    writer = ChunkWriter(session, offset, length, checksum, digest=digest)
    try:
        remaining = length
        while remaining is None or remaining > 0:
            block = read(BLOCK if remaining is None else min(BLOCK, remaining))
            if not block:
                break
            writer.write((block,))
            if remaining is not None:
                remaining -= len(block)
    except BaseException:
        writer.abort()
        raise
    return writer.finish()


def _note_digest(session: UploadSession, digest: tuple[str, str] | None) -> None:
    """Record the whole file's digest brought by a chunk (`Upload-Sha256`, `Upload-Crc32c`)."""
    if digest is None:
        return
    algorithm, value = digest
    if algorithm != session.digest_algorithm:
        wanted = DIGEST_HEADERS.get(session.digest_algorithm)
        raise PathError(f"this upload is checked by {session.digest_algorithm}: send {wanted}" if wanted
                        else "this upload was created without a whole-file digest: send none")
    if value == session.digest:
        return
    if session.digest:
        raise PathError(f"the upload's {algorithm} was given as {session.digest}, not {value}", 422)
    session.digest = value
    UploadSession.objects.filter(pk=session.pk).update(digest=value)


def _completed(session: UploadSession) -> bool:
    return UploadSession.objects.filter(pk=session.pk, completed__isnull=False).exists()


def _complete(session: UploadSession) -> None:
    """Verify the upload whose last byte arrived and put it in place, unless it waits for the
    digest it was promised (a 0-byte file needs none)."""
    if session.digest_later and not session.digest and session.size:
        return
    dest = _dest(session)
    name = part_name(session)
    try:
        fd = open_part(session, dest, os.O_RDONLY)
    except FileNotFoundError:
        raise PathError("the upload's data is gone: start a new upload", 410) from None
    try:
        size = os.fstat(fd).st_size
        if size != session.size:
            raise PathError(f"the upload has {size} of {session.size} bytes", 409)
        # hashed as the bytes arrived; read back only where this process did not see them
        digest = (upload_digest.take(session.pk, session.digest_algorithm, fd, size).hexdigest()
                  if session.digest else "")
    finally:
        os.close(fd)
    if digest and digest != session.digest:
        cancel(session)
        raise PathError(f"checksum mismatch: the file's {session.digest_algorithm} is {digest}, not {session.digest}; "
                        "the upload was discarded", 422)
    if lstat_or_none(dest.parent) is None:
        mkdir(session.user, dest.parent.virtual)
    put_in_place(dest, name, size, usage.reservation_of(session, dest), overwrite=session.overwrite)
    session.completed = timezone.now()
    UploadSession.objects.filter(pk=session.pk).update(completed=session.completed)


def cancel(session: UploadSession) -> None:
    """Remove the upload, its data and its reservation."""
    upload_digest.forget(session.pk)
    with scratch_fd(area(session)) as scratch:
        remove_at(part_name(session), scratch)
    session.delete()


def cleanup_stale(*, user: User | None = None, max_age: timedelta | None = None) -> int:
    """Remove uploads untouched for `max_age` (settings.PFS_UPLOAD_TTL unless given; finished
    ones as old too), with their data. Without `user`, also sweep orphaned temporary files out
    of every scratch directory."""
    if max_age is None:
        max_age = settings.PFS_UPLOAD_TTL
    cutoff = timezone.now() - max_age
    stale = UploadSession.objects.filter(updated__lt=cutoff)
    if user is not None:
        stale = stale.filter(user=user)
    count = 0
    for session in stale.select_related("user"):
        cancel(session)
        count += 1
    if user is None:
        count += _sweep_orphans(max_age)
    return count


def _sweep_orphans(max_age: timedelta) -> int:
    known = {part_file_name(pk) for pk in UploadSession.objects.values_list("pk", flat=True)}
    limit = time.time() - max_age.total_seconds()
    count = 0
    root = settings.PFS_ROOT
    if not root.is_dir():
        return 0
    dirs = list(root.glob(f"*/{HOME_SCRATCH}/*")) + list(root.glob("*/" + "/".join(PUBLIC_SCRATCH)))
    for d in dirs:
        try:  # O_NOFOLLOW: never sweep elsewhere through a link
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.name == ".lock" or entry.name in known:
                        continue
                    try:
                        if entry.stat(follow_symlinks=False).st_mtime < limit:
                            remove_at(entry.name, fd)
                            count += 1
                    except FileNotFoundError:
                        continue
        finally:
            os.close(fd)
    return count
