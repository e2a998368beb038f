"""paddlectl's own transfer speeds: `Storage.upload_file` and `Storage.download_file` (what
`paddlectl cp` runs) of a 2 GiB file over HTTP on loopback, against the real server (uvicorn
with core.server's protocol, as in the Procfile, started as bench/pfs_transfer.py starts
it). Prints upload MB/s, download MB/s and their ratio (goal: download >= 0.8x upload).

    .venv/bin/python bench/pfs_download.py [--size-mib 2048] [--repeat 3] [--progress]

Unlike bench/pfs_transfer.py, whose client moves bytes with sendfile/splice to measure the
server, this measures the client: httpx, the resumable upload protocol in 64 MiB PATCHes, and the
streamed download to `<dest>.part` renamed into place. Both directions get the same preparation
(`ready`: no dirty pages, source in the page cache, destination gone); best of `--repeat`, median
beside it. `--progress` passes a progress callback, as the CLI's bar does, to show it costs nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "client"))

from pfs_transfer import MB, ROOT, MiB, random_file, ready, service_env, sha256, start_server  # noqa: E402

from paddlectl.sdk import Client  # noqa: E402


def cpu() -> float:
    """This process's CPU seconds: the client's, as the server runs in another process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the best is the headline")
    ap.add_argument("--progress", action="store_true", help="report progress as the CLI does")
    args = ap.parse_args()
    size = args.size_mib * MiB

    tmp = Path(tempfile.mkdtemp(prefix="pfs-dl-bench-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None))
    server = None
    try:
        env, token = service_env(tmp)
        src, digest = random_file(tmp / "src.bin", size)
        server, port = start_server(env)
        calls = [0]

        def progress(done: int, total: int) -> None:
            calls[0] += 1

        report = progress if args.progress else None
        client = Client(f"http://127.0.0.1:{port}", token=token, username="bench", timeout=120)
        storage = client.storage
        dest = f"{client.home()}/big.bin"
        stored = tmp / "pfs" / "local" / "home" / "bench" / "big.bin"
        down = tmp / "down.bin"
        small = tmp / "warm.bin"
        small.write_bytes(os.urandom(MiB))
        storage.upload_file(small, f"{client.home()}/warm.bin")  # imports, first request, home
        storage.download_file(f"{client.home()}/warm.bin", tmp / "warm.out")
        up, dl, up_cpu, dl_cpu = [], [], [], []
        for _ in range(args.repeat):
            if storage.exists(dest):
                storage.rm(dest)
            ready(src)
            t, c = time.perf_counter(), cpu()
            storage.upload_file(src, dest, progress=report)
            up.append(time.perf_counter() - t)
            up_cpu.append(cpu() - c)
            ready(stored, down)
            t, c = time.perf_counter(), cpu()
            storage.download_file(dest, down, progress=report)
            dl.append(time.perf_counter() - t)
            dl_cpu.append(cpu() - c)
        client.close()
        assert sha256(stored) == digest, "uploaded file differs"
        assert sha256(down) == digest, "downloaded file differs"

        def rate(t: float) -> str:
            return f"{t:6.2f} s {size / t / MB:7.0f} MB/s"

        print(f"file: {args.size_mib} MiB; paddlectl (httpx) against uvicorn + core.server; "
              f"best (median) of {args.repeat}; both sides hashed equal"
              + (f"; {calls[0]} progress calls" if args.progress else ""))
        print(f"paddlectl upload:   {rate(min(up))}   (median {rate(statistics.median(up))})")
        print(f"paddlectl download: {rate(min(dl))}   (median {rate(statistics.median(dl))})")
        ratio, median = min(up) / min(dl), statistics.median(up) / statistics.median(dl)
        gib = size / 2**30
        print(f"client CPU (user + system) per GiB, median: upload {statistics.median(up_cpu) / gib:.2f} s "
              f"(sha256 of the file included), download {statistics.median(dl_cpu) / gib:.2f} s")
        print(f"download / upload speed: {ratio:.2f}x (median {median:.2f}x; goal >= 0.8)")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
