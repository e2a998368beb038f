"""PFS transfer benchmark: upload and download of a 1 GiB file over HTTP on loopback, through
the real ASGI server (daphne, as in the Procfile) in a subprocess, against `cp` of the same file
in the same run. Prints throughput ratios (goals: upload >= 0.7x cp, download >= 0.8x cp) and the
server's peak RSS growth during the transfers (goal < 64 MB).

    .venv/bin/python bench/pfs_transfer.py [--size-mib 1024] [--chunk-mib 16]

Everything lives in a temporary directory (its own database, PFS root and user) removed at the
end. The upload uses the resumable protocol (/api/v2/uploads/, PATCH chunks); the download is a
streamed GET of /api/v2/files/content/.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import socket
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


def drop_from_cache(path: Path) -> None:
    """Write the file back and let the next reader find it where `cp` found its source."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
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


def setup(var: Path, env: dict) -> str:
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


def upload(port: int, token: str, src: Path, dest: str, chunk: int) -> None:
    size = src.stat().st_size
    conn = http.client.HTTPConnection("127.0.0.1", port, blocksize=chunk)
    auth = {"Authorization": f"Token {token}"}
    conn.request("POST", "/api/v2/uploads/", json.dumps({"path": dest, "size": size}),
                 {**auth, "Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    if resp.status != 201:
        raise SystemExit(f"create failed: {resp.status} {body}")
    url = f"/api/v2/uploads/{body['id']}/"
    with open(src, "rb", buffering=0) as f:
        offset = 0
        while offset < size:
            data = f.read(chunk)
            conn.request("PATCH", url, data, {**auth, "Upload-Offset": str(offset),
                                              "Content-Type": "application/offset+octet-stream"})
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200:
                raise SystemExit(f"PATCH failed: {resp.status} {answer[:300]!r}")
            offset += len(data)
    conn.close()


def download(port: int, token: str, path: str, dst: Path) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", f"/api/v2/files/content/?path={path}", headers={"Authorization": f"Token {token}"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"download failed: {resp.status} {resp.read()[:300]!r}")
    buf = bytearray(4 * MiB)
    view = memoryview(buf)
    total = 0
    with open(dst, "wb", buffering=0) as out:
        while n := resp.readinto(view):
            out.write(view[:n])
            total += n
    conn.close()
    return total


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--chunk-mib", type=int, default=16, help="upload chunk size (server max 64)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs of each measurement")
    ap.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    args = ap.parse_args()
    size, chunk = args.size_mib * MiB, args.chunk_mib * MiB

    tmp = Path(tempfile.mkdtemp(prefix="pfs-bench-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None))
    server = None
    try:
        env = {**os.environ, "PADDLECLOUD_VAR": str(tmp / "var"), "PFS_ROOT": str(tmp / "pfs"),
               "DJANGO_SETTINGS_MODULE": "paddleweb.settings", "LOG_LEVEL": "WARNING"}
        env.pop("DATABASE_URL", None)
        token = setup(tmp, env)
        src = tmp / "src.bin"
        with open(src, "wb") as f:
            for _ in range(size // (64 * MiB)):
                f.write(os.urandom(64 * MiB))
            f.write(os.urandom(size % (64 * MiB)))
        drop_from_cache(src)
        digest = sha256(src)

        port = free_port()
        cmd = {"daphne": ["daphne", "-b", "127.0.0.1", "-p", str(port), "paddleweb.asgi:application"],
               "uvicorn": ["uvicorn", "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
                           "paddleweb.asgi:application"]}[args.server]
        server = subprocess.Popen([str(Path(PY).parent / cmd[0]), *cmd[1:]], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port, server)
        # warm up (imports, first request), then take the baseline RSS
        upload(port, token, _small(tmp), "/pfs/local/home/bench/warm", MiB)
        download(port, token, "/pfs/local/home/bench/warm", tmp / "warm.out")
        sampler = RssSampler(server.pid)
        base_rss = sampler.rss()
        sampler.start()

        stored = tmp / "pfs" / "local" / "home" / "bench" / "big.bin"
        t_cp_up = t_up = t_cp_down = t_down = float("inf")
        up_peak = down_peak = 0
        for _ in range(args.repeat):
            # Each measurement starts with no dirty pages, so none pays for another's writeback.
            os.sync()
            t_cp_up = min(t_cp_up, timed(subprocess.run, ["cp", str(src), str(tmp / "pfs" / "cp-copy.bin")]))
            (tmp / "pfs" / "cp-copy.bin").unlink()
            os.sync()
            sampler.peak = 0
            t_up = min(t_up, timed(upload, port, token, src, "/pfs/local/home/bench/big.bin", chunk))
            up_peak = max(up_peak, sampler.peak - base_rss)
            os.sync()
            t_cp_down = min(t_cp_down, timed(subprocess.run, ["cp", str(stored), str(tmp / "cp-down.bin")]))
            (tmp / "cp-down.bin").unlink()
            os.sync()
            sampler.peak = 0
            t_down = min(t_down, timed(download, port, token, "/pfs/local/home/bench/big.bin", tmp / "down.bin"))
            down_peak = max(down_peak, sampler.peak - base_rss)
        sampler.stop.set()
        assert sha256(stored) == digest, "uploaded file differs"
        assert sha256(tmp / "down.bin") == digest, "downloaded file differs"

        gib = size / 2**30
        print(f"file: {args.size_mib} MiB, upload chunks of {args.chunk_mib} MiB, server: {args.server} (ASGI), "
              f"best of {args.repeat}; both sides hashed equal")
        print(f"cp (upload side):   {t_cp_up:6.2f} s  {gib / t_cp_up:6.2f} GiB/s")
        print(f"HTTP upload:        {t_up:6.2f} s  {gib / t_up:6.2f} GiB/s   ratio {t_cp_up / t_up:5.2f}x cp "
              "(goal >= 0.7)")
        print(f"cp (download side): {t_cp_down:6.2f} s  {gib / t_cp_down:6.2f} GiB/s")
        print(f"HTTP download:      {t_down:6.2f} s  {gib / t_down:6.2f} GiB/s   ratio {t_cp_down / t_down:5.2f}x cp "
              "(goal >= 0.8)")
        print(f"server peak RSS growth: upload {up_peak / MiB:.1f} MiB, download {down_peak / MiB:.1f} MiB "
              f"(goal < 64 MB; baseline {base_rss / MiB:.0f} MiB)")
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
