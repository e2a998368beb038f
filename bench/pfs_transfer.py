"""PFS transfer benchmark: upload and download of a 1 GiB file over HTTP on loopback, through
the real ASGI server (uvicorn, as in the Procfile) in a subprocess, against `cp` of the same
file in the same run. Prints MB/s of each side, the ratios (goals: upload >= 0.7x cp, download
>= 0.8x cp) and the server's peak RSS growth during the transfers (goal < 64 MB).

    .venv/bin/python bench/pfs_transfer.py [--size-mib 1024] [--chunk-mib 64] [--repeat 5]

Everything lives in a temporary directory (its own database, PFS root and user) removed at the
end. The upload uses the resumable protocol (POST /api/v2/uploads/, then PATCH chunks with a
token, as paddlectl does); the download is a streamed GET of /api/v2/files/content/.

Keeping it honest:

* The client must not be what is measured. It is Python's http.client for the request and
  response heads, with the bodies moved by the kernel: each upload chunk is sent with
  sendfile(2) from the source file, and the download body is spliced from the socket into the
  destination file (splice(2) through a pipe; `--client copy` reads into an 8 MiB buffer and
  writes instead). So the client copies each byte at most once, as `cp` does (the upload's
  sendfile hands page-cache pages to TCP without copying; the download's splice copies once,
  pipe to page cache), and the rest of the HTTP side's time is the server's and the kernel's.
* `cp` gets the same durability as the server: the server does not fsync a finished upload
  (it renames it into place), so `cp` is not followed by fsync either. Before every
  measurement, of either side, `sync` leaves no dirty pages behind, so none pays for another's
  writeback; sources are in the page cache for both (just written or just read); destinations
  do not exist beforehand for either side (the previous upload is deleted through the API and
  the previous download file removed, outside the timing).
* Each round times cp and HTTP back to back, upload then download; the best of `--repeat`
  rounds is the headline (this is a shared 2-core machine: the best run is the one least
  disturbed by other work) and the median is printed beside it.
* For scale (`--no-reference` skips it), each round also moves the file over a loopback TCP
  connection with no HTTP server at all, using the system calls the HTTP path uses: for the
  upload the client's sendfile(2) into recv_into a 4 MiB buffer + pwrite; for the download
  pread of 4 MiB blocks + send into the client's splice(2). The gap between those lines and
  `cp` is what loopback TCP and two processes cost on this machine; the gap between them and
  the HTTP lines is what the server stack (uvicorn, ASGI, Django, PFS) costs. Two more lines
  split that stack: the same client against uvicorn serving `bare_app`, a bare ASGI app that
  drops upload bodies without writing them and streams the file as pfs.transfer does; what
  uvicorn alone reaches there bounds any ASGI application under it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MiB = 2**20
MB = 10**6
F_SETPIPE_SZ = 1031


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


class RssSampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.stop = threading.Event()

    def rss(self) -> int:
        return sum(p.memory_info().rss for p in [self.proc, *self.proc.children(recursive=True)])

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.01)


def setup(env: dict) -> str:
    subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    code = ("from django.contrib.auth import get_user_model; from accounts.models import Datacenter;"
            "from accounts.services import issue_token;"
            "Datacenter.objects.get_or_create(name='local');"
            "u = get_user_model().objects.create_user('bench', 'b@example.com', 'password');"
            "print(issue_token(u))")
    out = subprocess.run([PY, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not start")


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
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, 1 * MiB)
        except OSError:
            pass
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


def _loopback(send_side, recv_side) -> float:
    """Seconds for `send_side(sock)` to reach `recv_side(sock)` over a loopback TCP connection."""
    with socket.socket() as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        t0 = time.perf_counter()

        def sender():
            c, _ = ls.accept()
            with c:
                send_side(c)

        th = threading.Thread(target=sender)
        th.start()
        try:
            with socket.create_connection(ls.getsockname()) as c:
                recv_side(c)
        finally:
            th.join()
        return time.perf_counter() - t0


def reference_upload(src: Path, dst: Path) -> float:
    """The upload's data movement with no HTTP server: the bench client's sendfile(2) into the
    socket, and on the other side recv_into a 4 MiB buffer + pwrite, as a lean server would."""
    size = src.stat().st_size
    fd, out = os.open(src, os.O_RDONLY), os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def recv_side(c: socket.socket) -> None:
        buf = memoryview(bytearray(4 * MiB))
        pos = 0
        while pos < size:
            n = c.recv_into(buf)
            if not n:
                break
            os.pwrite(out, buf[:n], pos)
            pos += n

    try:
        return _loopback(lambda c: _sendfile(c, fd, 0, size), recv_side)
    finally:
        os.close(fd)
        os.close(out)


def reference_download(src: Path, dst: Path) -> float:
    """The download's data movement with no HTTP server: pread of 4 MiB blocks + send, as the
    server does, and the bench client's splice(2) into the file on the other side."""
    size = src.stat().st_size
    fd, out = os.open(src, os.O_RDONLY), os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def send_side(c: socket.socket) -> None:
        pos = 0
        while pos < size:
            block = os.pread(fd, 4 * MiB, pos)
            c.sendall(block)
            pos += len(block)

    class Fake:  # what _splice_body needs of an http.client response with nothing buffered
        class fp:
            @staticmethod
            def peek(n):
                return b""

    try:
        return _loopback(send_side, lambda c: _splice_body(Fake, c, out, size))
    finally:
        os.close(fd)
        os.close(out)


async def bare_app(scope, receive, send):
    """uvicorn with no framework and no storage code, for the `uvicorn alone` lines: a PUT's
    body is received and dropped (no disk write at all); a GET streams the file named by
    $BENCH_BARE_FILE in 4 MiB blocks read in a worker thread, as pfs.transfer does."""
    import asyncio

    if scope["type"] != "http":
        return
    if scope["method"] == "PUT":
        more = True
        while more:
            message = await receive()
            more = message["type"] == "http.request" and message.get("more_body", False)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    loop = asyncio.get_running_loop()
    fd = os.open(os.environ["BENCH_BARE_FILE"], os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(size).encode())]})
        pos = 0
        while pos < size:
            block = await loop.run_in_executor(None, os.pread, fd, 4 * MiB, pos)
            pos += len(block)
            await send({"type": "http.response.body", "body": block, "more_body": pos < size})
    finally:
        os.close(fd)


def bare_upload(port: int, src: Path, chunk: int) -> None:
    """PUTs of `chunk` bytes to bare_app, bodies sent with sendfile(2) like `upload`."""
    size = src.stat().st_size
    conn = http.client.HTTPConnection("127.0.0.1", port)
    fd = os.open(src, os.O_RDONLY)
    try:
        for offset in range(0, size, chunk):
            n = min(chunk, size - offset)
            conn.putrequest("PUT", "/")
            conn.putheader("Content-Length", str(n))
            conn.endheaders()
            _sendfile(conn.sock, fd, offset, n)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 204:
                raise SystemExit(f"bare PUT failed: {resp.status}")
    finally:
        os.close(fd)
        conn.close()


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def cp(src: Path, dst: Path) -> None:
    subprocess.run(["cp", str(src), str(dst)], check=True)


def delete(port: int, token: str, path: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("DELETE", f"/api/v2/files/?path={path}", headers={"Authorization": f"Token {token}"})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    if resp.status not in (204, 404):
        raise SystemExit(f"delete failed: {resp.status}")


def fresh(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.sync()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--chunk-mib", type=int, default=64, help="upload chunk size (server max 64)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds; the best is the headline")
    ap.add_argument("--client", choices=["splice", "copy"], default="splice",
                    help="how the download body reaches the file (see the docstring)")
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the same transfers without HTTP and with uvicorn alone")
    args = ap.parse_args()
    size, chunk = args.size_mib * MiB, args.chunk_mib * MiB

    tmp = Path(tempfile.mkdtemp(prefix="pfs-bench-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None))
    server = bare = None
    try:
        env = {**os.environ, "PADDLECLOUD_VAR": str(tmp / "var"), "PFS_ROOT": str(tmp / "pfs"),
               "DJANGO_SETTINGS_MODULE": "paddleweb.settings", "LOG_LEVEL": "WARNING"}
        env.pop("DATABASE_URL", None)
        token = setup(env)
        src = tmp / "src.bin"
        with open(src, "wb") as f:
            for _ in range(size // (64 * MiB)):
                f.write(os.urandom(64 * MiB))
            f.write(os.urandom(size % (64 * MiB)))
        settle(src)
        digest = sha256(src)

        port = free_port()
        server = subprocess.Popen([str(Path(PY).parent / "uvicorn"), "--host", "127.0.0.1", "--port", str(port),
                                   "--no-access-log", "--lifespan", "off", "paddleweb.asgi:application"],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=None if os.environ.get("BENCH_SERVER_LOG") else subprocess.DEVNULL)
        wait_for_port(port, server)
        if args.reference:
            bare_port = free_port()
            bare = subprocess.Popen([str(Path(PY).parent / "uvicorn"), "--host", "127.0.0.1", "--port",
                                     str(bare_port), "--no-access-log", "--lifespan", "off",
                                     "bench.pfs_transfer:bare_app"],
                                    cwd=ROOT, env={**env, "BENCH_BARE_FILE": str(src)},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_port(bare_port, bare)
        # warm up (imports, first request), then take the baseline RSS
        upload(port, token, _small(tmp), "/pfs/local/home/bench/warm", MiB)
        download(port, token, "/pfs/local/home/bench/warm", tmp / "warm.out", args.client)
        sampler = RssSampler(server.pid)
        base_rss = sampler.rss()
        sampler.start()

        dest = "/pfs/local/home/bench/big.bin"
        stored = tmp / "pfs" / "local" / "home" / "bench" / "big.bin"
        cp_copy, cp_down, down = tmp / "pfs" / "cp-copy.bin", tmp / "cp-down.bin", tmp / "down.bin"
        times: dict[str, list[float]] = {k: [] for k in ("cp_up", "up", "cp_down", "down", "ref_up", "ref_down",
                                                   "bare_up", "bare_down")}
        up_peak = down_peak = 0
        for _ in range(args.repeat):
            fresh(cp_copy)
            times["cp_up"].append(timed(cp, src, cp_copy))
            delete(port, token, dest)
            os.sync()
            sampler.peak = 0
            times["up"].append(timed(upload, port, token, src, dest, chunk))
            up_peak = max(up_peak, sampler.peak - base_rss)
            fresh(cp_down)
            times["cp_down"].append(timed(cp, stored, cp_down))
            fresh(down)
            sampler.peak = 0
            times["down"].append(timed(download, port, token, dest, down, args.client))
            down_peak = max(down_peak, sampler.peak - base_rss)
            if args.reference:
                fresh(tmp / "ref.bin")
                times["ref_up"].append(reference_upload(src, tmp / "ref.bin"))
                fresh(tmp / "ref.bin")
                times["ref_down"].append(reference_download(stored, tmp / "ref.bin"))
                fresh(tmp / "ref.bin")
                times["bare_up"].append(timed(bare_upload, bare_port, src, chunk))
                times["bare_down"].append(timed(download, bare_port, token, "-", tmp / "ref.bin", args.client))
        sampler.stop.set()
        assert sha256(stored) == digest, "uploaded file differs"
        assert sha256(down) == digest, "downloaded file differs"

        def rate(t: float) -> str:
            return f"{t:6.2f} s {size / t / MB:7.0f} MB/s"

        best = {k: min(v) for k, v in times.items() if v}
        med = {k: statistics.median(v) for k, v in times.items() if v}
        print(f"file: {args.size_mib} MiB, upload chunks of {args.chunk_mib} MiB, server: uvicorn (ASGI), "
              f"client: http.client + sendfile/{args.client}; best (median) of {args.repeat}; "
              "both sides hashed equal")
        print(f"cp (upload side):    {rate(best['cp_up'])}   (median {rate(med['cp_up'])})")
        print(f"HTTP upload:         {rate(best['up'])}   (median {rate(med['up'])})   "
              f"ratio {best['cp_up'] / best['up']:.2f}x cp (median {med['cp_up'] / med['up']:.2f}x; goal >= 0.7)")
        print(f"cp (download side):  {rate(best['cp_down'])}   (median {rate(med['cp_down'])})")
        print(f"HTTP download:       {rate(best['down'])}   (median {rate(med['down'])})   "
              f"ratio {best['cp_down'] / best['down']:.2f}x cp (median {med['cp_down'] / med['down']:.2f}x; "
              "goal >= 0.8)")
        if args.reference:
            print(f"no HTTP, same system calls (upload side):   {rate(best['ref_up'])}   "
                  f"ratio {best['cp_up'] / best['ref_up']:.2f}x cp")
            print(f"no HTTP, same system calls (download side): {rate(best['ref_down'])}   "
                  f"ratio {best['cp_down'] / best['ref_down']:.2f}x cp")
            print(f"uvicorn alone, body dropped (upload side):  {rate(best['bare_up'])}   "
                  f"ratio {best['cp_up'] / best['bare_up']:.2f}x cp")
            print(f"uvicorn alone, file streamed (download):    {rate(best['bare_down'])}   "
                  f"ratio {best['cp_down'] / best['bare_down']:.2f}x cp")
        print(f"server peak RSS growth: upload {up_peak / MB:.1f} MB, download {down_peak / MB:.1f} MB "
              f"(goal < 64 MB; baseline {base_rss / MB:.0f} MB)")
    finally:
        for proc in (server, bare):
            if proc is not None:
                proc.terminate()
                proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def _small(tmp: Path) -> Path:
    p = tmp / "warm.bin"
    p.write_bytes(os.urandom(MiB))
    return p


if __name__ == "__main__":
    main()
