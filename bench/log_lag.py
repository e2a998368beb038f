"""Live log lag: from a line being written by a replica to every websocket viewer having it.

A job's replica prints RATE timestamped lines a second for SECONDS seconds (one write and flush
per line); VIEWERS websocket clients, in a process of their own, follow the job through uvicorn as the job
page and `paddlectl logs -f` do. Lag is measured on the first line of each pushed
message (the oldest in it, so an upper bound for the message's lines). Each viewer's messages must
join up exactly (offset = the previous next_offset) and carry every line once. Baselines in the
same run: websockets compressed per viewer (uvicorn's default, what the server ran before), and
pushes on the watcher's passes only (LOG_INOTIFY=false, the 0.5 s default interval).
Goal: p99 < 0.5 s with 100 viewers of 20,000 lines/s.

    .venv/bin/python bench/log_lag.py [--viewers 100] [--rate 20000] [--seconds 10]
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

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
            if message["type"] != "log":
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
    from common import service, wait

    expected = rate * seconds
    with service() as user:  # sets Django up: the imports below need it
        from accounts.services import issue_token
        from jobs import services
        from jobs.models import Job
        from pfs.paths import home
        from tests.support import LiveASGI

        server = LiveASGI()
        server.server.config.ws_per_message_deflate = os.environ.get("BENCH_WS_DEFLATE") == "true"
        server.__enter__()
        pkg = home(user, "local").child("jobs", "loglag")
        pkg.disk.mkdir(parents=True, exist_ok=True)
        (pkg.disk / "train.py").write_text(PROGRAM.format(delay=8, rate=rate, seconds=seconds))
        job = services.submit_job(user, {"name": "loglag", "package": pkg.virtual, "entry": "python train.py",
                                         "mode": "collective", "trainers": 1, "cpu": "1", "memory": "256Mi"})
        url = server.url.replace("http://", "ws://") + f"/ws/jobs/{job.name}/"
        child = subprocess.Popen([sys.executable, __file__, "--viewers-at", url, issue_token(user),
                                  str(viewer_count), str(expected), str(seconds + 60)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "connected"
        wait(lambda: Job.objects.get(pk=job.pk).state in ("Running", "Succeeded", "Failed"), 120)
        result = json.loads(child.communicate(timeout=seconds + 90)[0])
        services.delete_job(job)
        server.__exit__(None, None, None)
    lags = [lag for r in result for lag in r["lags"]]
    return {"p50": percentile(lags, 0.5), "p99": percentile(lags, 0.99), "messages": len(lags) / len(result),
            "lines": [r["lines"] for r in result], "gaps": sum(r["gaps"] for r in result),
            "complete": all(r["first"] == 0 and r["lines"] == expected for r in result), "expected": expected}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--viewers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--viewers-at", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.viewers_at:
        url, token, count, expected, seconds = args.viewers_at
        started = time.process_time()
        result = viewers(url, token, int(count), int(expected), float(seconds))
        print(f"viewers' cpu {time.process_time() - started:.1f} s", file=sys.stderr)
        print(json.dumps(result))
        return
    if args.child:  # one mode per process: settings are read once
        print(json.dumps(run(args.viewers, args.rate, args.seconds)))
        return
    results = {}
    for mode, inotify, deflate in (("pushed on write", "true", "false"), ("compressed (before)", "true", "true"),
                                   ("passes only", "false", "false")):
        env = {**os.environ, "LOG_INOTIFY": inotify, "WATCH_INTERVAL": "0.5", "BENCH_WS_DEFLATE": deflate}
        out = subprocess.run([sys.executable, __file__, "--child", *sys.argv[1:]], env=env, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        results[mode] = r = json.loads(out.strip().splitlines()[-1])
        lines = r["lines"]
        print(f"{mode:22s} p50 {r['p50'] * 1000:7.1f} ms  p99 {r['p99'] * 1000:7.1f} ms  "
              f"{r['messages']:.0f} messages/viewer  lines/viewer min {min(lines)} max {max(lines)} "
              f"of {r['expected']}  gaps {r['gaps']}  complete {r['complete']}")
    new, old = results["pushed on write"], results["compressed (before)"]
    print(f"ratio p99 before/now: {old['p99'] / new['p99']:.1f}x; "
          f"goal p99 < 500 ms, no lost or doubled line: "
          f"{'met' if new['p99'] < 0.5 and new['complete'] and not new['gaps'] else 'NOT met'}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
