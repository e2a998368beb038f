"""A small HTTP/1.1 load generator: CONNECTIONS keep-alive connections, each sending its next
GET as soon as the previous answer is in, for SECONDS; prints one JSON line (requests/s, latency
p50/p99 in seconds, errors). Run as a process of its own, so the bench's own work never delays it:

    .venv/bin/python bench/load.py PORT PATH [--connections 32] [--seconds 5] [--header 'K: V']

uvloop and httptools (which uvicorn brings) keep its cost per request far below the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httptools


class _Answer:
    def __init__(self) -> None:
        self.done = False
        self.parser = httptools.HttpResponseParser(self)

    def on_message_complete(self) -> None:
        self.done = True


async def _connection(port: int, request: bytes, until: float, latencies: list[float], errors: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            answer = _Answer()
            start = time.perf_counter()
            writer.write(request)
            while not answer.done:
                data = await reader.read(1 << 16)
                if not data:
                    raise ConnectionError("the server closed the connection")
                answer.parser.feed_data(data)
            latencies.append(time.perf_counter() - start)
            if answer.parser.get_status_code() != 200:
                errors.append(answer.parser.get_status_code())
    finally:
        writer.close()


async def run(port: int, path: str, headers: list[str], connections: int, seconds: float) -> dict:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    latencies: list[float] = []
    errors: list[int] = []
    start = time.perf_counter()
    until = start + seconds
    await asyncio.gather(*(_connection(port, request, until, latencies, errors) for _ in range(connections)))
    elapsed = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
    return {"requests": len(latencies), "rps": len(latencies) / elapsed, "p50": statistics.median(latencies),
            "p99": q[98], "errors": len(errors), "statuses": sorted(set(errors))[:5]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("path")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--header", action="append", default=[])
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(run(args.port, args.path, args.header, args.connections, args.seconds))))


if __name__ == "__main__":
    main()
