"""Live log lag through the running service: from a line being written by a replica to every
websocket viewer having it.

The service is `make run`'s tree at its defaults (bench/service.py). A job's replica, submitted
over HTTP, prints RATE timestamped lines a second for SECONDS seconds (one write and flush per
line); VIEWERS websocket clients, in a process of their own, follow the job as the job page and
`paddlectl logs -f` do, with the admin's token. Lag is measured on the first line of each pushed
message (the oldest in it, so an upper bound for the message's lines). Each viewer's messages
must join up exactly (offset = the previous next_offset) and carry every line once. The service
tree's CPU time over the run, divided by the lines delivered (lines x viewers), says what a
delivered line costs. Goal: p99 < 0.5 s with 100 viewers of 20,000 lines/s, and every line.

    .venv/bin/python bench/log_lag.py [--viewers 100] [--rate 20000] [--seconds 10]
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPLICA = "trainer-0"  # the one replica printing; the job's build log comes on the same socket
PROGRAM = """import sys, time
time.sleep({delay})
rate, seconds = {rate}, {seconds}
start = time.time()
for n in range(rate * seconds):
    ahead = start + n / rate - time.time()
    if ahead > 0:
        time.sleep(ahead)
    sys.stdout.write(f"{{n}} {{time.time():.6f}} {{'x' * 30}}\\n")
    sys.stdout.flush()
"""


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


async def view(url: str, token: str, expected: int, deadline: float, ready: asyncio.Event, counter: list[int],
               total: int) -> dict:
    from websockets.asyncio.client import connect

    lags: list[float] = []
    lines, next_offset, gaps, first, torn = 0, None, 0, None, False
    async with connect(url, additional_headers={"Authorization": f"Token {token}"}, max_size=None,
                       open_timeout=60) as ws:
        await ws.recv()  # the job's state
        counter[0] += 1
        if counter[0] == total:
            ready.set()
        while lines < expected and time.time() < deadline:
            try:
                frame = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.time()))
            except TimeoutError:
                break
            now = time.time()
            message = json.loads(frame)
            if message["type"] != "log" or message["replica"] != REPLICA:  # not the build's log
                continue
            if next_offset is not None and message["offset"] != next_offset:
                gaps += 1
            next_offset = message["next_offset"]
            text = message["text"]
            # A message may end inside a line (pushes are capped in size): then the next one's
            # first whole line is the one after that line's rest.
            whole = text.split("\n")[1 if torn else 0:-1]
            torn = not text.endswith("\n")
            if whole:
                seq, stamp = whole[0].split(" ")[:2]
                first = int(seq) if first is None else first
                lags.append(now - float(stamp))
            lines += text.count("\n")
    return {"lags": lags, "lines": lines, "gaps": gaps, "first": first}


def viewers(url: str, token: str, count: int, expected: int, seconds: float) -> list[dict]:
    """In a process of their own, as real viewers are: prints "connected" once all are, then the results."""
    async def main() -> list[dict]:
        ready, counter = asyncio.Event(), [0]
        deadline = time.time() + seconds
        tasks = [asyncio.create_task(view(url, token, expected, deadline, ready, counter, count))
                 for _ in range(count)]
        await ready.wait()
        print("connected", flush=True)
        return await asyncio.gather(*tasks)

    return asyncio.run(main())


def run(viewer_count: int, rate: int, seconds: int) -> dict:
    from service import Service

    from paddlectl.sdk import Client

    expected = rate * seconds
    with Service(name="loglag") as svc, tempfile.TemporaryDirectory() as tmp:
        assert svc.api is not None
        sdk = Client(svc.url, token=svc.token, username="admin")
        (Path(tmp) / "train.py").write_text(PROGRAM.format(delay=20, rate=rate, seconds=seconds))
        package = f"{sdk.home()}/bench/loglag"
        sdk.storage.upload_file(Path(tmp) / "train.py", f"{package}/train.py")
        sdk.close()
        res = svc.api.post("/api/v2/jobs/", json={"name": "loglag", "package": package, "entry": "python train.py",
                                                   "mode": "collective", "trainers": 1, "cpu": "1", "memory": "256Mi"})
        assert res.status_code == 201, res.text
        url = svc.url.replace("http://", "ws://") + "/ws/jobs/loglag/"
        child = subprocess.Popen([sys.executable, __file__, "--viewers-at", url, svc.token, str(viewer_count),
                                  str(expected), str(seconds + 80)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "connected"
        cpu = svc.cpu_seconds()
        result = json.loads(child.communicate(timeout=seconds + 120)[0])
        cpu = svc.cpu_seconds() - cpu
        state = svc.api.get("/api/v2/jobs/loglag/").json()["state"]
    lags = [lag for r in result for lag in r["lags"]]
    delivered = sum(r["lines"] for r in result)
    return {"p50": percentile(lags, 0.5), "p99": percentile(lags, 0.99), "messages": len(lags) / len(result),
            "lines": [r["lines"] for r in result], "gaps": sum(r["gaps"] for r in result), "state": state,
            "complete": all(r["first"] == 0 and r["lines"] == expected for r in result), "expected": expected,
            "cpu_us_per_line": cpu / max(delivered, 1) * 1e6, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--viewers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--viewers-at", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.viewers_at:
        url, token, count, expected, seconds = args.viewers_at
        result = viewers(url, token, int(count), int(expected), float(seconds))
        print(json.dumps(result))
        return
    r = run(args.viewers, args.rate, args.seconds)
    lines = r["lines"]
    print(f"p50 {r['p50'] * 1000:.1f} ms  p99 {r['p99'] * 1000:.1f} ms  {r['messages']:.0f} messages/viewer  "
          f"lines/viewer min {min(lines)} max {max(lines)} of {r['expected']}  gaps {r['gaps']}  "
          f"service CPU {r['cpu']:.1f} s")
    emit([Row(f"{args.viewers} viewers of {args.rate} lines/s: write -> viewer lag p50/p99, every line",
              "-", f"{r['p50'] * 1000:.0f}/{r['p99'] * 1000:.0f} ms, {'every line' if r['complete'] else 'LINES LOST'}",
              "-", "p99 < 500 ms, every line", r["p99"] < 0.5 and r["complete"] and not r["gaps"]),
          Row("service CPU per delivered line (lines x viewers)", "-", f"{r['cpu_us_per_line']:.1f} us", "-", "-",
              True)], f"live logs through the service, {args.seconds} s")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "client"))
    from report import Row, emit

    main()
