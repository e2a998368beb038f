"""PFS transfer benchmark: upload and download of a 1 GiB file over HTTP on loopback, through
the real server (uvicorn with core.server's protocol, as in the Procfile) in a subprocess,
against `cp` of the same file in the same run. Prints MB/s of each side, the ratios (goals:
upload >= 0.7x cp, download >= 0.8x cp) and the server's peak RSS growth during the transfers
(goal < 64 MB).

    .venv/bin/python bench/pfs_transfer.py [--size-mib 1024] [--chunk-mib 0] [--repeat 7]

Everything lives in a temporary directory (its own database, PFS root and user) removed at the
end. The upload uses the resumable protocol as a token client does (POST /api/v2/uploads/, then
PATCH with the rest of the file, the protocol's fastest form; `--chunk-mib` sends it in chunks
instead); the download is a GET of /api/v2/files/content/. On the server both go through the
whole stack (knox token check, upload session and path checks, quota, atomic rename, usage
accounting; Django's view and response for the download), with the bytes moved by the
kernel: splice(2) socket -> file for the upload, sendfile(2) file -> socket for the download.

Keeping it honest:

* The client must not be what is measured. It is Python's http.client for the request and
  response heads, with the bodies moved by the kernel: the upload body is sent with sendfile(2)
  from the source file, and the download body is spliced from the socket into the destination
  file (splice(2) through a pipe; `--client copy` reads into an 8 MiB buffer and writes
  instead). So the client copies each byte at most once, as `cp` does.
* `cp` gets the same durability as the server: the server does not fsync a finished upload
  (it renames it into place), so `cp` is not followed by fsync either. Before every
  measurement, of either side (`ready`), `sync` leaves no dirty pages behind, so none pays for
  another's writeback; the source is read once more, so it is in the page cache for both;
  the destination does not exist (the previous upload is deleted through the API and the
  previous download file removed), all outside the timing.
* Each round times cp and HTTP back to back, upload then download; the best of `--repeat`
  rounds is the headline (this is a shared 2-core machine whose speed swings between runs:
  the best run is the one least disturbed by other work) and the median is printed beside it.
* For scale (`--no-reference` skips it), each round also moves the file over a loopback TCP
  connection between two processes with no HTTP at all, using the same system calls (sendfile
  on one side, splice on the other): what loopback TCP itself reaches against `cp` here. It
  is the ceiling for any server: measured on a 2-core machine (2026-11), both cores spend
  the whole transfer in the kernel (TCP on the sending side, the copy into the page cache on
  the receiving side), and the server's own user-space time is ~0.05 s per GiB.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MiB = 2**20
MB = 10**6
F_SETPIPE_SZ = 1031
SETTLE = float(os.environ.get("BENCH_SETTLE", "1"))  # seconds after each sync


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


class PeakRss:
    """The server's peak RSS, read from the kernel's high-water mark (VmHWM), which `reset`
    sets back to the current RSS (clear_refs 5). Nothing polls, so measuring costs the
    transfers nothing (a sampling thread in this process would compete with the client)."""

    def __init__(self, pid: int):
        self.pid = pid

    def _status(self, key: str) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise SystemExit(f"no {key} in /proc/{self.pid}/status")

    def current(self) -> int:
        return self._status("VmRSS")

    def reset(self) -> None:
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")

    def peak(self) -> int:
        return self._status("VmHWM")


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


def service_env(tmp: Path) -> tuple[dict, str]:
    """The environment of a throwaway service under `tmp` (SQLite, its own PFS), and a token."""
    env = {**os.environ, "PADDLECLOUD_VAR": str(tmp / "var"), "PFS_ROOT": str(tmp / "pfs"),
           "DJANGO_SETTINGS_MODULE": "paddleweb.settings", "LOG_LEVEL": "WARNING"}
    env.pop("DATABASE_URL", None)
    return env, setup(env)


def random_file(path: Path, size: int) -> tuple[Path, str]:
    """`size` random bytes at `path`, flushed to disk; the file and its sha256."""
    with open(path, "wb") as f:
        for _ in range(size // (64 * MiB)):
            f.write(os.urandom(64 * MiB))
        f.write(os.urandom(size % (64 * MiB)))
    settle(path)
    return path, sha256(path)


def start_server(env: dict) -> tuple[subprocess.Popen, int]:
    """uvicorn with the Procfile's protocol on a free port, once it answers."""
    port = free_port()
    server = subprocess.Popen([str(Path(PY).parent / "uvicorn"), "--http", "core.server:HttpProtocol",
                               "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--lifespan", "off",
                               "paddleweb.asgi:application"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=None if os.environ.get("BENCH_SERVER_LOG") else subprocess.DEVNULL)
    wait_for_port(port, server)
    return server, port


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

    class fp:
        @staticmethod
        def peek(n):
            return b""


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--chunk-mib", type=int, default=0, help="upload chunk size (0: the whole file in one PATCH)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best is the headline")
    ap.add_argument("--client", choices=["splice", "copy"], default="splice",
                    help="how the download body reaches the file (see the docstring)")
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the same transfer without HTTP")
    args = ap.parse_args()
    size = args.size_mib * MiB
    chunk = args.chunk_mib * MiB or size

    tmp = Path(tempfile.mkdtemp(prefix="pfs-bench-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None))
    server = None
    try:
        env, token = service_env(tmp)
        src, digest = random_file(tmp / "src.bin", size)
        server, port = start_server(env)
        # warm up (imports, first request), then take the baseline RSS
        upload(port, token, _small(tmp), "/pfs/local/home/bench/warm", MiB)
        download(port, token, "/pfs/local/home/bench/warm", tmp / "warm.out", args.client)
        rss = PeakRss(server.pid)
        base_rss = rss.current()

        dest = "/pfs/local/home/bench/big.bin"
        stored = tmp / "pfs" / "local" / "home" / "bench" / "big.bin"
        cp_copy, cp_down, down = tmp / "pfs" / "cp-copy.bin", tmp / "cp-down.bin", tmp / "down.bin"
        times: dict[str, list[float]] = {k: [] for k in ("cp_up", "up", "cp_down", "down", "ref")}
        up_peak = down_peak = 0
        for _ in range(args.repeat):
            ready(src, cp_copy)
            times["cp_up"].append(timed(cp, src, cp_copy))
            delete(port, token, dest)
            ready(src)
            rss.reset()
            times["up"].append(timed(upload, port, token, src, dest, chunk))
            up_peak = max(up_peak, rss.peak() - base_rss)
            ready(stored, cp_down)
            times["cp_down"].append(timed(cp, stored, cp_down))
            ready(stored, down)
            rss.reset()
            times["down"].append(timed(download, port, token, dest, down, args.client))
            down_peak = max(down_peak, rss.peak() - base_rss)
            if args.reference:
                ready(src, tmp / "ref.bin")
                times["ref"].append(reference(src, tmp / "ref.bin"))
        assert sha256(stored) == digest, "uploaded file differs"
        assert sha256(down) == digest, "downloaded file differs"

        def rate(t: float) -> str:
            return f"{t:6.2f} s {size / t / MB:7.0f} MB/s"

        best = {k: min(v) for k, v in times.items() if v}
        med = {k: statistics.median(v) for k, v in times.items() if v}
        print(f"file: {args.size_mib} MiB, uploaded in PATCHes of {chunk // MiB} MiB, "
              "server: uvicorn + core.server (ASGI, Django), "
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
            print(f"no HTTP, loopback TCP with sendfile -> splice: {rate(best['ref'])}   "
                  f"ratio {best['cp_up'] / best['ref']:.2f}x cp")
        print(f"server peak RSS growth: upload {up_peak / MB:.1f} MB, download {down_peak / MB:.1f} MB "
              f"(goal < 64 MB; baseline {base_rss / MB:.0f} MB)")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def _small(tmp: Path) -> Path:
    p = tmp / "warm.bin"
    p.write_bytes(os.urandom(MiB))
    return p


if __name__ == "__main__":
    main()
