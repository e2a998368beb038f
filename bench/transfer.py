"""Transfers as users run them: `paddlectl cp` up and down a 1 GiB file against the running
service (`make run`'s tree, over HTTP on loopback, with a token), against the physical limit here:
a no-HTTP loopback socket copy of the same file between two processes (sendfile(2) into the
socket, splice(2) from it into the file), measured round by round in the same run. Goal:
`paddlectl cp` each way at least 0.8x that copy. Also the server's own paths, with a client that
moves bodies by sendfile/splice (so the client is not what is measured): its download at least as
fast as its upload.

    .venv/bin/python bench/transfer.py [--size-mib 1024] [--rounds 5]

Keeping it honest: before every measurement (`ready`) the destination is gone, `sync` leaves no
dirty pages to write back, and the source is read once more so it is in the page cache for every
side alike; and the order of the sides turns by one each round, since on this machine whatever
runs first after a large write and its `sync` runs slowest (at a third of the speed, or less, in
runs of the same download several times in a row). `paddlectl cp` is the command line, a process
of its own, as users start it; its upload is checked whole by CRC-32C (the server verifies it
before the upload is put in place). Medians and p99 of the rounds; the load average is printed with them.

The first rounds are not counted (WARMUP of them): every side writes a gigabyte into pages the
machine has not used lately, and here (a virtual machine whose kernel hands free memory back to
its host: /sys/module/page_reporting) such pages come back from the host slowly, and at a speed
that swings. Measured on 2026-12-06: touching 1 GiB of fresh memory took 0.7 to 2.7 s from one
try to the next, and the loopback copy ran at 3.2-4.5 GB/s into /dev/null but 1.5-2.9 GB/s into
a new file. In one run of fifteen rounds the copy ran at 394, 1,005 and 857 MB/s in the first
three, then at 2,856-3,273 in all but one of the rest; five counted rounds, the first of them
included, put its median anywhere between 1.2 and 3.0 GB/s, and so every ratio with it.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from report import Row, emit
from service import ROOT, Service

PY = sys.executable
MiB = 2**20
MB = 10**6
F_SETPIPE_SZ = 1031
SETTLE = float(os.environ.get("BENCH_SETTLE", "1"))  # seconds after each sync
GOAL = 0.8


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 * MiB):
            h.update(block)
    return h.hexdigest()


def settle(path: Path) -> None:
    """Write the file back and read it once, so it is clean and in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        while os.read(fd, 8 * MiB):
            pass
    finally:
        os.close(fd)


def random_file(path: Path, size: int) -> tuple[Path, str]:
    """`size` random bytes at `path`, flushed to disk; the file and its sha256."""
    with open(path, "wb") as f:
        for _ in range(size // (64 * MiB)):
            f.write(os.urandom(64 * MiB))
        f.write(os.urandom(size % (64 * MiB)))
    settle(path)
    return path, sha256(path)


def _sendfile(sock: socket.socket, fd: int, offset: int, count: int) -> None:
    end = offset + count
    while offset < end:
        n = os.sendfile(sock.fileno(), fd, offset, end - offset)
        if n == 0:
            raise SystemExit("the source file shrank")
        offset += n


def upload(port: int, token: str, src: Path, dest: str, chunk: int) -> None:
    size = src.stat().st_size
    conn = http.client.HTTPConnection("127.0.0.1", port)
    auth = {"Authorization": f"Token {token}"}
    conn.request("POST", "/api/v2/uploads/", json.dumps({"path": dest, "size": size}),
                 {**auth, "Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    if resp.status != 201:
        raise SystemExit(f"create failed: {resp.status} {body}")
    url = f"/api/v2/uploads/{body['id']}/"
    fd = os.open(src, os.O_RDONLY)
    try:
        offset = 0
        while offset < size:
            n = min(chunk, size - offset)
            conn.putrequest("PATCH", url)
            for k, v in {**auth, "Upload-Offset": str(offset), "Content-Length": str(n),
                         "Content-Type": "application/offset+octet-stream"}.items():
                conn.putheader(k, v)
            conn.endheaders()
            _sendfile(conn.sock, fd, offset, n)
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200:
                raise SystemExit(f"PATCH failed: {resp.status} {answer[:300]!r}")
            offset += n
            if resp.will_close:
                conn.close()  # reconnects on the next request
    finally:
        os.close(fd)
        conn.close()


def _splice_body(resp: http.client.HTTPResponse, sock: socket.socket, out: int, length: int) -> int:
    """The response body into `out`: what http.client already buffered, then socket -> pipe ->
    file inside the kernel."""
    total = 0
    buffered = resp.fp.peek(0)[: length] if length else b""
    if buffered:
        resp.fp.read(len(buffered))
        os.write(out, buffered)
        total = len(buffered)
    r, w = os.pipe()
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(w, F_SETPIPE_SZ, 1 * MiB)
        while total < length:
            n = os.splice(sock.fileno(), w, min(1 * MiB, length - total))
            if n == 0:
                break
            while n:
                m = os.splice(r, out, n)
                n -= m
                total += m
    finally:
        os.close(r)
        os.close(w)
    return total


def download(port: int, token: str, path: str, dst: Path, client: str = "splice") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", f"/api/v2/files/content/?path={path}", headers={"Authorization": f"Token {token}"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"download failed: {resp.status} {resp.read()[:300]!r}")
    length = int(resp.getheader("Content-Length"))
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if client == "splice":
            total = _splice_body(resp, conn.sock, out, length)
        else:
            buf = memoryview(bytearray(8 * MiB))
            total = 0
            while n := resp.readinto(buf):
                os.write(out, buf[:n])
                total += n
    finally:
        os.close(out)
        conn.close()
    if total != length:
        raise SystemExit(f"download ended after {total} of {length} bytes")
    return total


def reference(src: Path, dst: Path) -> float:
    """Seconds to move `src` into `dst` over loopback TCP with no HTTP: a child process
    sendfile(2)s it into the socket, this one splices it into the file."""
    size = src.stat().st_size
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                with socket.create_connection(ls.getsockname()) as c:
                    fd = os.open(src, os.O_RDONLY)
                    _sendfile(c, fd, 0, size)
            finally:
                os._exit(0)
        conn, _ = ls.accept()
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with conn:
            got = _splice_body(_NothingBuffered, conn, out, size)
        os.close(out)
        os.waitpid(pid, 0)
        elapsed = time.perf_counter() - t0
    if got != size:
        raise SystemExit(f"the reference transfer moved {got} of {size} bytes")
    return elapsed


class _NothingBuffered:
    """What _splice_body needs of an http.client response that has buffered nothing."""

    class fp:  # noqa: N801 - stands in for the response's `fp` attribute
        @staticmethod
        def peek(n):
            return b""


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def ready(src: Path, dst: Path | None = None) -> None:
    """Before every measurement, of either side: the destination gone, no dirty pages left to
    write back (`sync`, then a moment for a virtual disk still flushing on the host), and the
    source read once more so it is in the page cache (this machine pages out idle page cache)."""
    if dst is not None:
        dst.unlink(missing_ok=True)
    os.sync()
    time.sleep(SETTLE)
    buf = bytearray(8 * MiB)
    with open(src, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass




def paddlectl(env: dict, *args: str) -> float:
    """Seconds `paddlectl cp ARGS` takes, as a user runs it (a process of its own)."""
    start = time.perf_counter()
    subprocess.run([PY, "-m", "paddlectl", "cp", *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=3, help="rounds run first and not counted")
    args = ap.parse_args()
    size = args.size_mib * MiB
    with Service(name="transfer") as svc, tempfile.TemporaryDirectory(prefix="transfer-", dir=svc.var) as tmp_:
        assert svc.api is not None
        tmp = Path(tmp_)
        src, digest = random_file(tmp / "src.bin", size)
        remote = "/pfs/local/home/admin/big.bin"
        stored = svc.var / "pfs" / "local" / "home" / "admin" / "big.bin"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "client"), "HOME": str(tmp), "PADDLECTL_ENDPOINT": svc.url,
               "PADDLECTL_TOKEN": svc.token, "PADDLECTL_USERNAME": "admin"}
        times: dict[str, list[float]] = {k: [] for k in ("reference", "cp up", "cp down", "server up", "server down")}
        took: dict[str, float] = {}  # this round's seconds, by side
        # As installed (pip compiles it): from bytecode, even where PYTHONDONTWRITEBYTECODE is set.
        compileall.compile_dir(str(ROOT / "client" / "paddlectl"), quiet=1)
        paddlectl(env, str(src), remote)  # warm up: imports, the home, the first request
        def for_upload() -> None:  # its destination does not exist yet; the source is cached
            assert svc.api is not None
            svc.api.delete("/api/v2/files/", params={"path": remote})
            ready(src)

        def for_download() -> None:  # the file to read is there (put there if need be), cached
            if not stored.exists():
                upload(svc.port, svc.token, src, remote, size)
            ready(stored, tmp / "down.bin")

        # Each side: what is made ready outside the timing, and what is timed.
        sides: dict[str, tuple[Callable[[], None], Callable[[], float]]] = {
            "reference": (lambda: ready(src, tmp / "ref.bin"), lambda: reference(src, tmp / "ref.bin")),
            "cp up": (for_upload, lambda: paddlectl(env, str(src), remote)),
            "cp down": (for_download, lambda: paddlectl(env, remote, str(tmp / "down.bin"))),
            "server up": (for_upload, lambda: timed(upload, svc.port, svc.token, src, remote, size)),
            "server down": (for_download, lambda: timed(download, svc.port, svc.token, remote, tmp / "down.bin")),
        }
        names = list(sides)
        for n in range(-args.warmup, args.rounds):
            # The order turns by one each round: a side that runs right after a large write (the
            # first after the reference runs at a fraction of the speed here, whichever it is)
            # does not always follow the same one.
            for name in names[n % len(names):] + names[:n % len(names)]:
                prepare, measure = sides[name]
                prepare()
                took[name] = measure()
                if n == -args.warmup and name == "cp down":
                    assert sha256(stored) == digest and sha256(tmp / "down.bin") == digest, "a copy differs"
            if n >= 0:
                for name, seconds in took.items():
                    times[name].append(seconds)
            print("round" if n >= 0 else "warm-up", n,
                  "  ".join(f"{k} {size / took[k] / MB:.0f} MB/s" for k in times), flush=True)

    def speed(key: str) -> float:
        return size / statistics.median(times[key]) / MB

    def spread(key: str) -> str:  # slowest round: the p99 of so few
        return f"{speed(key):.0f} MB/s (slowest {size / max(times[key]) / MB:.0f})"

    ref = speed("reference")
    rows = [Row(f"paddlectl cp {args.size_mib} MiB {way}", f"{spread('reference')} loopback copy",
                spread(key), f"{speed(key) / ref:.2f}x", f">= {GOAL}x", speed(key) / ref >= GOAL)
            for way, key in (("upload", "cp up"), ("download", "cp down"))]
    rows.append(Row("server download vs upload (sendfile/splice client)", spread("server up") + " up",
                    spread("server down") + " down", f"{speed('server down') / speed('server up'):.2f}x",
                    ">= 1.0x", speed("server down") >= speed("server up")))
    emit(rows, f"transfers, median of {args.rounds} rounds after {args.warmup} not counted")


if __name__ == "__main__":
    main()
