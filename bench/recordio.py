"""RecordIO benchmark: write and read 100 MB of records (snappy, PaddlePaddle's default) with
paddlectl's compiled snappy back end (cramjam + google-crc32c, `paddlectl[fast]`), against the
pure-Python fallback measured in the same run. Goal: under 5 s each way for 100 MB.

    .venv/bin/python bench/recordio.py [--mb 100] [--fallback-mb 10] [--record-kib 4] [--repeat 3]

The records are what a training set holds: half pickled float vectors (compressible), half
random bytes (like encoded images, incompressible), `--record-kib` each. Writing is
`recordio.Writer(path).write(record)` for every record and close(); reading iterates
`recordio.Reader(path)`; the file is in the page cache. The fallback is slow, so it runs on
`--fallback-mb` of the same records; the ratio is of throughputs (MB/s), and the fallback's
time for `--mb` is what its throughput gives. Each figure is the median of `--repeat` runs;
the load average is printed beside them (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "client"))

from paddlectl import recordio, snappy  # noqa: E402

MB = 10**6


def make_records(total: int, record_size: int) -> list[bytes]:
    rng = random.Random(7)
    records, size = [], 0
    while size < total:
        if len(records) % 2:
            record = os.urandom(record_size)
        else:
            floats = [round(rng.random(), 3) for _ in range(record_size // 10)]
            record = pickle.dumps({"x": floats, "y": rng.randrange(10)})[:record_size]
        records.append(record)
        size += len(record)
    return records


def write(path: Path, records: list[bytes]) -> None:
    with recordio.Writer(path) as w:
        for r in records:
            w.write(r)


def read(path: Path) -> int:
    with recordio.Reader(str(path)) as r:
        return sum(1 for _ in r)


def median(fn, *args, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(codec: snappy.Backend, records: list[bytes], path: Path, repeat: int) -> tuple[float, float]:
    snappy.backend = codec
    w = median(write, path, records, repeat=repeat)
    r = median(read, path, repeat=repeat)
    if read(path) != len(records):
        raise SystemExit("read back a different number of records")
    return w, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--fallback-mb", type=int, default=10)
    ap.add_argument("--record-kib", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    compiled = snappy.backend
    if compiled is snappy.PURE:
        raise SystemExit("cramjam and google-crc32c are not installed: pip install 'paddlectl[fast]'")
    records = make_records(args.mb * MB, args.record_kib * 1024)
    size = sum(map(len, records))
    few, small = [], 0
    for r in records:
        if small >= args.fallback_mb * MB:
            break
        few.append(r)
        small += len(r)
    with tempfile.TemporaryDirectory(prefix="recordio-bench-") as tmp:
        path = Path(tmp) / "bench.recordio"
        fast_w, fast_r = measure(compiled, records, path, args.repeat)
        stored = path.stat().st_size
        slow_w, slow_r = measure(snappy.PURE, few, path, args.repeat)
    snappy.backend = compiled

    def rate(seconds: float, n: int) -> float:
        return n / seconds / MB

    print(f"{len(records)} records of {args.record_kib} KiB, {size / MB:.0f} MB "
          f"({stored / MB:.0f} MB stored, snappy); medians of {args.repeat}")
    for what, fast, slow in (("write", fast_w, slow_w), ("read", fast_r, slow_r)):
        print(f"{what:5}  {compiled.name}: {fast:6.2f} s {rate(fast, size):7.1f} MB/s (goal < 5 s)   "
              f"pure Python on {small / MB:.0f} MB: {slow:6.2f} s {rate(slow, small):6.1f} MB/s, so "
              f"{size / rate(slow, small) / MB:.0f} s for {size / MB:.0f} MB   "
              f"ratio {rate(fast, size) / rate(slow, small):.0f}x")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f} on {} CPUs".format(*os.getloadavg(), os.cpu_count()))
    from report import Row, emit  # bench/: the one table of `make bench`

    emit([Row(f"recordio {what} {size / MB:.0f} MB ({compiled.name}; the client, no service)",
              f"{rate(slow, small):.1f} MB/s pure Python", f"{fast:.2f} s, {rate(fast, size):.0f} MB/s",
              f"{rate(fast, size) / rate(slow, small):.0f}x", "< 5 s", fast < 5)
          for what, fast, slow in (("write", fast_w, slow_w), ("read", fast_r, slow_r))], "recordio")


if __name__ == "__main__":
    main()
