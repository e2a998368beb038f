"""v1 upload speed: the original compiled `paddlectl cp` protocol (/api/v1, 4 MiB multipart
chunks) against paddlectl's own (/api/v2 resumable uploads), through the running service
(`make run`'s tree at its defaults, bench/service.py) over HTTP with a token. Goal: a v1 upload
takes at most 2x the time of a v2 upload of the same file.

    .venv/bin/python bench/legacy_upload.py [--size-mib 256] [--rounds 9]

Each round uploads the same random file both ways, in alternating order (v2 first in even
rounds, v1 first in odd ones), each to a destination that does not exist yet (removed, and
`sync`ed, outside the timing), so both sides meet the same machine. Requests are sent the way
each client sends them, on one keep-alive connection, with the bodies read from the file by
sendfile(2) so that the client is not what is measured:

* v2 (baseline): paddlectl's own Storage.upload_file, in this process (the SDK; the command
  line's start is not counted, as the v1 side has none): `POST /api/v2/uploads/` with
  `crc32c_later`, then `PATCH` chunks of up to 256 MiB by sendfile while a thread computes the
  file's CRC-32C, which goes with a later chunk (verified by the server at the end). `--bare`
  also times the protocol without any whole-file check, in 64 MiB chunks.
* v1, as the compiled client's cp: `stat` the destination, `touch` it to the size, then for
  each 4 MiB chunk `GetChunkMeta` (the server's md5 of what is there), the md5 of the local
  chunk, and, as they differ, a `POST /api/v1/pfs/storage/chunks` of a multipart body with the
  fixed boundary whose one part `chunk` is named `chunksize=<n>&offset=<o>&path=<p>`.

Prints the median and p99 of the per-round seconds (MB/s) of each side and their ratio, the
median and p99 latency of single v1 chunk POSTs and v2 PATCHes, and the load average before
and after (this machine is shared; absolute times swing with it, the ratio much less). Both
stored files are hashed equal to the source at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from report import Row, emit
from service import ROOT, Service
from transfer import MB, MiB, random_file, sha256

sys.path.insert(0, str(ROOT / "client"))
from paddlectl import Client

BOUNDARY = "8d7b0e5709d756e21e971ff4d9ac3b20"
V1_CHUNK = 4 * MiB  # the compiled client's chunk
BARE_CHUNK = 64 * MiB


def p99(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]


class Connection:
    """One keep-alive HTTP connection with a token; bodies from a file go by sendfile(2)."""

    def __init__(self, port: int, token: str):
        self.port, self.auth = port, {"Authorization": f"Token {token}"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port)

    def request(self, method: str, url: str, body: bytes | None = None, headers: dict | None = None,
                file: tuple[int, int, int] | None = None, trailer: bytes = b"") -> tuple[int, bytes]:
        """`body`, then `count` bytes of `fd` from `offset` (`file`), then `trailer`."""
        headers = {**self.auth, **(headers or {})}
        length = len(body or b"") + (file[2] if file else 0) + len(trailer)
        self.conn.putrequest(method, url, skip_accept_encoding=True)
        for k, v in {**headers, "Content-Length": str(length)}.items():
            self.conn.putheader(k, v)
        self.conn.endheaders()
        sock = self.conn.sock
        if body:
            sock.sendall(body)
        if file:
            fd, offset, count = file
            end = offset + count
            while offset < end:
                offset += os.sendfile(sock.fileno(), fd, offset, end - offset)
        if trailer:
            sock.sendall(trailer)
        resp = self.conn.getresponse()
        answer = resp.read()
        if resp.will_close:
            self.conn.close()
        return resp.status, answer

    def json(self, method: str, url: str, payload=None) -> dict:
        body = json.dumps(payload).encode() if payload is not None else None
        status, answer = self.request(method, url, body, {"Content-Type": "application/json"} if body else None)
        if status not in (200, 201):
            raise SystemExit(f"{method} {url}: {status} {answer[:300]!r}")
        return json.loads(answer)

    def close(self) -> None:
        self.conn.close()


def upload_v2(url: str, token: str, src: Path, dest: str) -> None:
    """As `paddlectl cp` uploads a file."""
    with Client(url, token=token, username="admin") as client:
        client.storage.upload_file(src, dest)


def upload_bare(c: Connection, src: Path, dest: str) -> None:
    """The v2 protocol with no whole-file check."""
    size = src.stat().st_size
    created = c.json("POST", "/api/v2/uploads/", {"path": dest, "size": size})
    url = f"/api/v2/uploads/{created['id']}/"
    fd = os.open(src, os.O_RDONLY)
    try:
        for offset in range(0, size, BARE_CHUNK):
            status, answer = c.request("PATCH", url, headers={"Upload-Offset": str(offset),
                                                              "Content-Type": "application/offset+octet-stream"},
                                       file=(fd, offset, min(BARE_CHUNK, size - offset)))
            if status != 200:
                raise SystemExit(f"PATCH: {status} {answer[:300]!r}")
    finally:
        os.close(fd)


def upload_v1(c: Connection, src: Path, dest: str, *, latencies: list[float],
              steps: dict[str, list[float]] | None = None) -> int:
    """The compiled client's cp of one file; the number of chunks it sent. `latencies` gets
    each chunk POST's seconds, `steps` (if given) each GetChunkMeta's and local md5's."""
    steps = steps if steps is not None else {"meta": [], "md5": []}
    size = src.stat().st_size
    q = urlencode({"method": "stat", "path": dest})
    c.request("GET", f"/api/v1/pfs/files?{q}")  # missing: the client goes on to touch it
    touched = c.json("POST", "/api/v1/pfs/files", {"method": "touch", "filesize": size, "path": dest})
    if touched["err"]:
        raise SystemExit(f"touch: {touched['err']}")
    sent = 0
    with open(src, "rb", buffering=0) as f:
        fd = f.fileno()
        for offset in range(0, size, V1_CHUNK):
            n = min(V1_CHUNK, size - offset)
            q = urlencode({"method": "GetChunkMeta", "path": dest, "offset": offset, "chunksize": V1_CHUNK})
            t = time.perf_counter()
            meta = c.json("GET", f"/api/v1/pfs/chunks?{q}")
            steps["meta"].append(time.perf_counter() - t)
            if meta["err"]:
                raise SystemExit(f"GetChunkMeta: {meta['err']}")
            t = time.perf_counter()
            local = hashlib.md5(os.pread(fd, n, offset)).hexdigest()
            steps["md5"].append(time.perf_counter() - t)
            if meta["results"]["checksum"] == local:
                continue
            name = urlencode({"chunksize": n, "offset": offset, "path": dest})
            head = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="chunk"; filename="{name}"\r\n'
                    "Content-Type: application/octet-stream\r\n\r\n").encode()
            t = time.perf_counter()
            status, answer = c.request("POST", "/api/v1/pfs/storage/chunks", head,
                                       {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
                                       file=(fd, offset, n), trailer=f"\r\n--{BOUNDARY}--\r\n".encode())
            latencies.append(time.perf_counter() - t)
            if status != 200 or json.loads(answer)["err"]:
                raise SystemExit(f"chunk POST: {status} {answer[:300]!r}")
            sent += 1
    return sent


def remove(c: Connection, path: str) -> None:
    status, answer = c.request("DELETE", f"/api/v2/files/?{urlencode({'path': path})}")
    if status not in (204, 404):
        raise SystemExit(f"delete: {status} {answer[:300]!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--bare", action="store_true", help="also time v2 without a whole-file check")
    args = ap.parse_args()
    size = args.size_mib * MiB
    load_before = os.getloadavg()

    with Service(name="legacy") as svc, tempfile.TemporaryDirectory(prefix="legacy-", dir=svc.var) as tmp_:
        tmp = Path(tmp_)
        os.environ["HOME"] = str(tmp)  # paddlectl's upload records (~/.paddle/uploads) go there
        src, digest = random_file(tmp / "src.bin", size)
        c = Connection(svc.port, svc.token)
        home = "/pfs/local/home/admin"
        dests = {"v1": f"{home}/v1.bin", "v2": f"{home}/v2.bin", "bare": f"{home}/bare.bin"}
        sides = ["v2", "v1"] + (["bare"] if args.bare else [])
        times: dict[str, list[float]] = {k: [] for k in sides}
        lat: dict[str, list[float]] = {k: [] for k in sides}
        steps: dict[str, list[float]] = {"meta": [], "md5": []}
        # warm up: imports, first requests, the source in the page cache
        upload_v1(c, src, f"{home}/warm1.bin", latencies=[])
        upload_v2(svc.url, svc.token, src, f"{home}/warm2.bin")
        for r in range(args.rounds):
            for side in sides if r % 2 == 0 else sides[::-1]:
                remove(c, dests[side])
                os.sync()
                t = time.perf_counter()
                if side == "v1":
                    if upload_v1(c, src, dests[side], latencies=lat[side], steps=steps) != -(-size // V1_CHUNK):
                        raise SystemExit("v1 skipped a chunk of a new file")
                elif side == "v2":
                    upload_v2(svc.url, svc.token, src, dests[side])
                else:
                    upload_bare(c, src, dests[side])
                times[side].append(time.perf_counter() - t)
        stored = svc.var / "pfs" / "local" / "home" / "admin"
        for side in sides:
            if sha256(stored / Path(dests[side]).name) != digest:
                raise SystemExit(f"the {side} upload differs from the source")
        c.close()
    load_after = os.getloadavg()

    def line(name: str, values: list[float]) -> str:
        med, slow = statistics.median(values), p99(values)
        return (f"{name:<34} median {med:6.2f} s {size / med / MB:6.0f} MB/s   "
                f"p99 {slow:6.2f} s {size / slow / MB:6.0f} MB/s")

    print(f"file: {args.size_mib} MiB, {args.rounds} rounds, v1 and v2 alternating; the service as make run starts "
          "it; client: http.client + sendfile; stored files hashed equal")
    print(line("v2 (paddlectl's upload_file)", times["v2"]))
    if args.bare:
        print(line("v2 bare (no whole-file check)", times["bare"]))
    print(line("v1 (compiled client: 4 MiB chunks)", times["v1"]))
    ratio = statistics.median(times["v1"]) / statistics.median(times["v2"])
    print(f"ratio v1/v2: median {ratio:.2f}x, p99 {p99(times['v1']) / p99(times['v2']):.2f}x (goal <= 2)"
          + (f"; against bare v2 {statistics.median(times['v1']) / statistics.median(times['bare']):.2f}x"
             if args.bare else ""))
    print(f"v1 chunk POST (4 MiB): median {statistics.median(lat['v1']) * 1000:.1f} ms, "
          f"p99 {p99(lat['v1']) * 1000:.1f} ms over {len(lat['v1'])}")
    print(f"v1 per chunk besides the POST: GetChunkMeta median {statistics.median(steps['meta']) * 1000:.1f} ms, "
          f"p99 {p99(steps['meta']) * 1000:.1f} ms; the client's md5 of the chunk median "
          f"{statistics.median(steps['md5']) * 1000:.1f} ms")
    print("load average (1, 5, 15 min): before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f} on {} CPUs".format(
        *load_before, *load_after, os.cpu_count()))
    v1, v2 = statistics.median(times["v1"]), statistics.median(times["v2"])
    emit([Row(f"v1 upload (compiled client's protocol) of {args.size_mib} MiB, median of {args.rounds}",
              f"{size / v2 / MB:.0f} MB/s v2 (paddlectl's)", f"{size / v1 / MB:.0f} MB/s", f"{ratio:.2f}x the time",
              "<= 2x the time", ratio <= 2)], "legacy v1 upload")


if __name__ == "__main__":
    main()
