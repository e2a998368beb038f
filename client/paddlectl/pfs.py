"""PFS storage over /api/v2/files, /api/v2/uploads: listing, moving, and transfers that resume.

Uploads: small files go in one PUT; bigger ones use the resumable protocol (POST uploads/ with
`crc32c_later`, then PATCH chunks at explicit offsets, streamed from the file). The file's
CRC-32C (sha256 without google-crc32c's compiled code: pfs_upload.py) is computed in a thread
while the chunks go out, and goes to the server in an `Upload-Crc32c` header of the first chunk
sent once it is known (an empty last PATCH if the bytes got there first); the server hashes the
bytes as they arrive and checks the two at the last byte (a resumed upload's too, so a file
changed since the run that began it is refused). A chunk carries no checksum of its own, so the
server can splice it straight to disk, and the bytes of a chunk cut off mid-way are kept. After
a dropped connection the client asks the server for the upload's offset and sends on from there;
a later run of the same command continues the upload that a record under ~/.paddle/uploads names (pfs_upload.py).
A server older than `crc32c_later` gets `sha256_later`, one older than that the sha256 up front.
Downloads stream to `<dest>.part`, each block written as the connection reads it, and resume
with `Range` + `If-Range` (the ETag), so a file that changed meanwhile is fetched again from the
start rather than spliced. bench/transfer.py measures both directions.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from . import pfs_local, pfs_upload, wire
from ._httpx import httpx
from .errors import APIError, ConnectionFailed, NotFound, PaddlectlError
from .pfs_paths import is_remote as is_remote
from .pfs_paths import join
from .pfs_upload import REPORT_INTERVAL as REPORT_INTERVAL
from .pfs_upload import Meter, Progress

if TYPE_CHECKING:
    from typing import Protocol

    from .api import API, JsonObject

    class Client(Protocol):
        """What Storage needs of its client (paddlectl.sdk.Client, which imports this module)."""

        api: API

        @property
        def datacenter(self) -> str: ...

        def home(self) -> str: ...

SMALL_FILE = 4 << 20  # at most this: one PUT
CHUNK = 64 << 20  # resumable upload chunk: the most a server takes in one request from any client
# ... but a server that takes a digest later streams a chunk with a token to disk whatever its
# size (pfs/asgi_fast.py, bounded by the upload's size only): by sendfile, chunks this big. Each
# chunk costs a round trip and the server's per-request work with the connection idle (about
# 10-25 ms here), 16 times per GiB at 64 MiB; the bytes of a chunk cut off are kept all the same.
WIRE_CHUNK = 256 << 20
DIGEST_HEADERS = {"crc32c": "Upload-Crc32c", "sha256": "Upload-Sha256"}  # the whole file's, on a chunk
RETRY_FOR = 300.0  # seconds a transfer keeps retrying a dropped connection


def _digest_algorithm(upload: dict[str, Any]) -> str | None:
    """How the upload's whole file is checked (None: it is not). Its digest goes with a chunk
    even where one was given before (by an earlier run): a file changed since is refused then."""
    return next((a for a in ("crc32c", "sha256") if upload.get(f"{a}_later") or upload.get(a)), None)


def _resume_etag(remote: str, part: Path, side: Path) -> str | None:
    """The ETag a partial download of `remote` in `part` was made from (its side file says), or
    None: then the partial copy cannot be resumed."""
    if not (part.exists() and side.exists()):
        return None
    try:
        info = json.loads(side.read_text())
        return info.get("etag") if info.get("path") == remote else None
    except (OSError, ValueError):
        return None


def _retry_connection(fn: Callable[[], Any], what: str, deadline: float) -> Any:
    """Call fn until it stops failing with a connection error, backing off, until deadline."""
    delay = 0.25
    while True:
        try:
            return fn()
        except (ConnectionFailed, httpx.TransportError) as e:
            if time.monotonic() + delay > deadline:
                raise ConnectionFailed(f"{what}: gave up after connection failures ({e})") from None
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


class Storage:
    def __init__(self, client: Client):
        self.client = client
        self.api = client.api
        self._home_ready = False

    def _ensure_home(self) -> None:
        """The server creates a home when it is listed but (as of now) not on a nested mkdir:
        list it once before the first write."""
        if not self._home_ready:
            self.api.get("files/", path=self.client.home(), limit=1)
            self._home_ready = True

    # --- metadata -----------------------------------------------------------------------------
    def stat(self, path: str) -> dict[str, Any]:
        return cast("JsonObject", self.api.get("files/stat/", path=path))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return bool(self.stat(path)["type"] == "dir")
        except NotFound:
            return False

    def ls(self, path: str | None = None) -> list[dict[str, Any]]:
        return list(self.api.paginate("files/", path=path or self.client.home(), limit=1000))

    def walk(self, path: str) -> Iterator[dict[str, Any]]:
        """Every file below directory `path` (depth first), with `path` set to its PFS path;
        an entry the listing places anywhere but in the directory listed is refused."""
        for entry in self.ls(path):
            if entry["type"] in ("dir", "file"):
                child = pfs_local.child_of(path, entry)
                yield from self.walk(child) if entry["type"] == "dir" else [entry]

    def mkdir(self, path: str) -> dict[str, Any]:
        self._ensure_home()
        return cast("JsonObject", self.api.post("files/mkdir/", {"path": path}))

    def rm(self, path: str, recursive: bool = False) -> None:
        self.api.delete("files/", params={"path": path, "recursive": "true" if recursive else "false"})

    def mv(self, src: str, dst: str, overwrite: bool = False) -> dict[str, Any]:
        return cast("JsonObject", self.api.post("files/move/", {"src": src, "dst": dst, "overwrite": overwrite}))

    def copy(self, src: str, dst: str, overwrite: bool = False) -> dict[str, Any]:
        """Server-side copy within PFS."""
        return cast("JsonObject", self.api.post("files/copy/", {"src": src, "dst": dst, "overwrite": overwrite}))

    def usage(self, datacenter: str | None = None) -> dict[str, Any]:
        return cast("JsonObject", self.api.get("storage/usage/", datacenter=datacenter or self.client.datacenter))

    # --- upload -------------------------------------------------------------------------------
    def upload_file(self, local: str | Path, remote: str, progress: Progress | None = None,
                    meter: Meter | None = None) -> dict[str, Any]:
        local = Path(local)
        size = local.stat().st_size
        meter = meter or Meter(size, progress)
        self._ensure_home()
        if size <= SMALL_FILE:
            data = local.read_bytes()
            entry = self.api.request("PUT", "files/content/", params={"path": remote}, content=data,
                                     headers={"Content-Type": "application/octet-stream"})
            meter.add(len(data))
            return cast("JsonObject", entry)
        return self._resumable(local, remote, size, meter)

    def _start_upload(self, local: Path, remote: str, st: os.stat_result,
                      record: pfs_upload.Record) -> dict[str, Any]:
        """The upload of `local` that an earlier run left unfinished (its record), or a new one
        checked by the best digest the server takes."""
        found, same = record.find(st)
        if found is not None:
            with contextlib.suppress(NotFound):
                if same:
                    return cast("JsonObject", self.api.get(f"uploads/{found}/"))
                self.api.delete(f"uploads/{found}/")  # of the file as it was: its room in the quota goes
        new = {"path": remote, "size": st.st_size, "overwrite": True}
        for algorithm in dict.fromkeys((pfs_upload.preferred_algorithm(), "sha256")):
            upload = self.api.post("uploads/", {**new, f"{algorithm}_later": True})
            if f"{algorithm}_later" in upload:
                break
            self.api.delete(f"uploads/{upload['id']}/")  # a server before it: it ignored the field
        else:  # a server before any digest later: the sha256 up front
            digest = pfs_upload.Hasher(local, "sha256").result()
            upload = self.api.post("uploads/", {**new, "sha256": digest})
        record.save(upload["id"], st)
        return cast("JsonObject", upload)

    def _resumable(self, local: Path, remote: str, size: int, meter: Meter) -> dict[str, Any]:
        st = local.stat()
        record = pfs_upload.Record(self.api.endpoint, local, remote)
        upload = self._start_upload(local, remote, st, record)
        algorithm = _digest_algorithm(upload)
        hasher = pfs_upload.Hasher(local, algorithm) if algorithm else None
        try:
            try:
                self._send_chunks(local, size, upload, hasher, meter)
            except APIError as e:
                if e.status != 422:
                    raise
                # the file's digest is not that of what the server got: it changed meanwhile
                with contextlib.suppress(PaddlectlError):
                    self.api.delete(f"uploads/{upload['id']}/")
                record.clear()
                raise PaddlectlError(f"{local} changed while it was being uploaded ({e}); "
                                     "the upload was discarded: run the command again") from None
        finally:
            if hasher is not None:
                hasher.stop()
        record.clear()
        return self.stat(remote)

    def _send_chunks(self, local: Path, size: int, upload: dict[str, Any], hasher: pfs_upload.Hasher | None,
                     meter: Meter) -> None:
        """PATCH the rest of the file from the upload's offset, and its digest as soon as it is
        known (an empty last chunk waits for it), until the server says the upload is complete."""
        path = f"uploads/{upload['id']}/"
        offset = int(upload["offset"])
        meter.add(offset)
        deadline = time.monotonic() + RETRY_FOR
        conn = wire.Connection(self.api) if wire.usable(self.api) else None
        chunk = WIRE_CHUNK if conn is not None and "sha256_later" in upload else CHUNK  # a server that streams
        with open(local, "rb") as f, contextlib.closing(conn) if conn else contextlib.nullcontext():
            while not upload.get("complete"):
                body = pfs_upload.FileSlice(f, local, offset, min(chunk, size - offset), meter)
                headers = {"Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream"}
                if hasher is not None and (hasher.ready() or not body.length):
                    headers[DIGEST_HEADERS[hasher.algorithm]] = hasher.result()
                try:
                    if conn is not None:  # the chunk from the file by sendfile(2)
                        upload = conn.send_file(path, headers, f.fileno(), offset, body.length, body.count)
                    else:
                        upload = self.api.request("PATCH", path, content=body,
                                                  headers={**headers, "Content-Length": str(body.length)})
                except (ConnectionFailed, APIError) as e:
                    if isinstance(e, APIError) and e.status != 409:
                        raise
                    # Dropped connection or a stale offset: ask where we are.
                    upload = _retry_connection(lambda: self.api.get(path), f"upload of {local}", deadline)
                else:
                    deadline = time.monotonic() + RETRY_FOR
                new = int(upload["offset"])
                meter.add(new - offset - body.sent)  # the server's word over what went out
                offset = new

    def upload_tree(self, local: str | Path, remote: str, progress: Progress | None = None) -> int:
        """Upload directory `local` so that its contents end up in `remote`; returns files sent."""
        local = Path(local)
        files = [p for p in sorted(local.rglob("*")) if p.is_file() and not p.is_symlink()]
        meter = Meter(sum(p.stat().st_size for p in files), progress)
        self.mkdir(remote)
        made = {remote}
        for p in files:
            rel = p.relative_to(local).as_posix()
            parent = join(remote, posixpath.dirname(rel)) if "/" in rel else remote
            if parent not in made:
                self.mkdir(parent)
                made.add(parent)
            self.upload_file(p, join(remote, rel), meter=meter)
        return len(files)

    def upload_package(self, local: str | Path, dest: str, progress: Progress | None = None) -> None:
        """Put directory `local` at `dest` as a whole: uploaded beside it first, then swapped in,
        so a failed upload never leaves a half-written package at `dest`."""
        parent, name = posixpath.split(dest.rstrip("/"))
        staging = join(parent, f".{name}.upload-{secrets.token_hex(4)}")
        try:
            self.upload_tree(local, staging, progress)
            if self.exists(dest):
                self.rm(dest, recursive=True)
            self.mv(staging, dest)
        except BaseException:
            with contextlib.suppress(PaddlectlError):
                self.rm(staging, recursive=True)
            raise

    # --- download -----------------------------------------------------------------------------
    def download_file(self, remote: str, local: str | Path, progress: Progress | None = None,
                      meter: Meter | None = None, size: int | None = None) -> Path:
        """Stream `remote` to `local`, resuming a previous partial download of the same file."""
        local = Path(local)
        part = local.with_name(local.name + ".part")
        side = local.with_name(local.name + ".part.json")
        if size is None:
            size = int(self.stat(remote).get("size", 0))
        meter = meter or Meter(size, progress)
        pfs_local.no_link(part, side)
        etag = _resume_etag(remote, part, side)
        if etag is None:
            part.unlink(missing_ok=True)
        start_done = meter.done
        deadline = time.monotonic() + RETRY_FOR
        while True:
            have = part.stat().st_size if part.exists() else 0
            # identity: the bytes of the file, which Range counts and iter_raw() hands over as read
            headers = {"Accept-Encoding": "identity"}
            if have and etag:
                headers.update({"Range": f"bytes={have}-", "If-Range": etag})
            seen: dict[str, str] = {}
            try:
                try:
                    if wire.usable(self.api):
                        self._download_spliced(remote, part, headers, meter, start_done, have, seen, size)
                    else:
                        self._download_streamed(remote, part, headers, meter, start_done, have, etag, seen, size)
                finally:
                    etag = seen.get("etag") or etag  # resume from what arrived, if it drops
                break
            except APIError as e:
                if e.status == 416 and have:  # our partial copy is already complete (or stale)
                    part.unlink(missing_ok=True)
                    etag = None
                    continue
                raise
            except pfs_local.Overlong:
                part.unlink(missing_ok=True)  # more than announced: not a file to resume
                raise
            except (ConnectionFailed, httpx.TransportError) as e:
                if time.monotonic() > deadline:
                    raise ConnectionFailed(f"download of {remote}: gave up after connection failures ({e})") from None
                time.sleep(0.5)
        os.replace(part, local)
        side.unlink(missing_ok=True)
        return local

    def _download_streamed(self, remote: str, part: Path, headers: dict[str, str], meter: Meter, start_done: int,
                           have: int, etag: str | None, seen: dict[str, str], listed: int | None) -> None:
        """download_file's request through httpx, the body appended to `part` (or replacing it
        when the server sends the whole file); the ETag into `seen` as soon as it is known."""
        side = part.with_name(part.name + ".json")
        with self.api.stream("GET", "files/content/", params={"path": remote}, headers=headers) as r:
            if r.headers.get("Content-Encoding", "identity") != "identity":
                raise PaddlectlError(f"download of {remote}: the server sent it encoded "
                                     f"({r.headers['Content-Encoding']}) though asked not to")
            resumed = r.status_code == 206
            end = pfs_local.expected_size(r.status_code, r.headers, have, listed)
            etag = r.headers.get("ETag") or etag
            if etag:
                seen["etag"] = etag
                side.write_text(json.dumps({"path": remote, "etag": etag}))
            mode = "ab" if resumed else "wb"
            meter.done = start_done + (have if resumed else 0)
            meter.report()
            with os.fdopen(os.open(part, pfs_local.open_flags(resumed), 0o666), mode) as f:
                # Blocks as the connection reads them (64 KiB): iter_bytes/iter_raw with a
                # chunk size re-chunk them through a BytesIO, which took 2-3x the CPU and
                # made downloads a quarter of upload speed. A buffered file passes blocks
                # bigger than its buffer straight to write(2).
                size = have if resumed else 0
                for block in r.iter_raw():
                    f.write(block)
                    meter.add(len(block))
                    size = pfs_local.check_size(remote, size + len(block), end)
                pfs_local.check_size(remote, size, end, done=True)

    def _download_spliced(self, remote: str, part: Path, headers: dict[str, str], meter: Meter, start_done: int,
                          have: int, seen: dict[str, str], listed: int | None) -> None:
        """download_file's request with the body spliced into `part` (wire.py); the ETag into `seen`."""
        side = part.with_name(part.name + ".json")
        out: list[int] = []

        def open_part(status: int, head: dict[str, str]) -> int:
            if head.get("content-encoding", "identity") != "identity":
                raise PaddlectlError(f"download of {remote}: the server sent it encoded "
                                     f"({head['content-encoding']}) though asked not to")
            resumed = status == 206
            pfs_local.expected_size(status, head, have, listed)  # wire.py reads Content-Length bytes, no more
            if etag := head.get("etag"):
                seen["etag"] = etag
                side.write_text(json.dumps({"path": remote, "etag": etag}))
            meter.done = start_done + (have if resumed else 0)
            meter.report()
            # at the end, not O_APPEND: splice(2) refuses a file opened for appending
            out.append(os.open(part, pfs_local.open_flags(resumed), 0o666))
            os.lseek(out[0], 0, os.SEEK_END)
            return out[0]

        conn = wire.Connection(self.api)
        try:
            conn.get_to_file("files/content/", {"path": remote}, headers, open_part, meter.add)
        finally:
            conn.close()
            for fd in out:
                os.close(fd)

    def download_tree(self, remote: str, local: str | Path, progress: Progress | None = None,
                      root: str | Path | None = None) -> int:
        """Download directory `remote` so that its contents end up in `local`; returns files.
        Nothing is written outside `root` (default: `local`), through links there or not."""
        local = Path(local)
        files = list(self.walk(remote))  # every name checked before the first byte is written
        meter = Meter(sum(int(e.get("size", 0)) for e in files), progress)
        local.mkdir(parents=True, exist_ok=True)
        top = Path(root) if root is not None else local
        base = posixpath.normpath(remote) + "/"
        written: dict[tuple[int, int], str] = {}  # what this run wrote, by inode: names folded into one
        for entry in files:
            target = local.joinpath(*entry["path"][len(base):].split("/"))
            pfs_local.make_parents(target, local, top)
            if target.exists() and (seen := written.get(pfs_local.inode(target))):
                raise pfs_local.UnsafeEntry(f"{entry['path']} and {seen} are one file here ({target}): refused")
            self.download_file(entry["path"], target, meter=meter, size=int(entry.get("size", 0)))
            written[pfs_local.inode(target)] = entry["path"]
        return len(files)
