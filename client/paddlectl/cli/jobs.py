"""Job commands: submit (also -from a job), get, logs, kill, suspend, resume, delete."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from ..errors import NotFound, PaddlectlError
from ..job import PaddleJob, suggest_job_name
from ..logs import BUILD, replica_name
from ..pfs_paths import in_home
from . import output
from .base import Context, UsageError, command
from .cluster import print_cluster
from .progress import transfer_progress

DEFAULT_ENTRY = "python train.py"  # seed 002's PaddleJob default, the examples' entry
JOB_COLUMNS: list[output.Column] = [
    ("NAME", lambda j: j["name"]),
    ("STATE", lambda j: j["state"]),
    ("MODE", lambda j: j.get("mode")),
    ("PSERVERS", lambda j: j.get("pservers")),
    ("TRAINERS", lambda j: j.get("trainers")),
    # Ages as kubectl shows them (how long ago); -o wide adds the times themselves.
    ("START", lambda j: output.age(j.get("started"))),
    ("COMP", lambda j: output.age(j.get("finished"))),
    ("AGE", lambda j: output.age(j.get("created"))),
    ("QUEUE", lambda j: queue_text(j)),
]
JOB_WIDE: list[output.Column] = [
    ("STARTED", lambda j: output.timestamp(j.get("started"))),
    ("COMPLETED", lambda j: output.timestamp(j.get("finished"))),
    ("DATACENTER", lambda j: j.get("datacenter")),
    ("CPU", lambda j: j.get("cpu")),
    ("MEMORY", lambda j: j.get("memory")),
    ("GPU", lambda j: j.get("gpu")),
    ("IMAGE", lambda j: j.get("image")),
    ("PACKAGE", lambda j: j.get("package")),
    ("RESTARTS", lambda j: j.get("restarts")),
    ("REASON", lambda j: j.get("reason")),
    ("MESSAGE", lambda j: j.get("message")),
]
WORKER_COLUMNS: list[output.Column] = [
    ("NAME", lambda r: r["name"]),
    ("STATUS", lambda r: r["state"]),
    ("START", lambda r: output.timestamp(r.get("started"))),
    ("RESTARTS", lambda r: r.get("restarts")),
    ("EXIT", lambda r: r.get("exit_code")),
]
WORKER_WIDE: list[output.Column] = [
    ("ENDPOINT", lambda r: f"{r.get('host')}:{r.get('port')}" if r.get("port") else None),
    ("POD", lambda r: r.get("pod")),
    ("COMP", lambda r: output.timestamp(r.get("finished"))),
    ("REASON", lambda r: r.get("reason")),
    ("MESSAGE", lambda r: r.get("message")),
]
EVENT_COLUMNS: list[output.Column] = [
    ("TIME", lambda e: output.timestamp(e.get("created"))),
    ("WHO", lambda e: e.get("replica") or "job"),
    ("STATE", lambda e: e.get("state")),
    ("REASON", lambda e: e.get("reason")),
    ("MESSAGE", lambda e: e.get("message")),
]


def queue_text(job: dict[str, Any]) -> str | None:
    """A queued job's place and why it waits, e.g. "#2: 2 of 2 running jobs used (quota)"."""
    if job.get("state") != "Queued" or not job.get("queue_position"):
        return None
    return f"#{job['queue_position']}: {job['message']}" if job.get("message") else f"#{job['queue_position']}"


def latest_job(ctx: Context) -> dict[str, Any]:
    """Your most recently submitted job, by creation time."""
    jobs = ctx.client.list(all=True)
    if not jobs:
        raise NotFound(404, None, "you have no jobs yet")
    return max(jobs, key=lambda j: j.get("created") or "")


def get_job(ctx: Context, name: str) -> dict[str, Any]:
    try:
        return ctx.client.get(name)
    except NotFound:
        raise NotFound(404, None, f"job '{name}' not found") from None


# --- submit ---------------------------------------------------------------------------------
# Flags left out are None, so that `submit -from <job>` changes only the fields given; a plain
# submit fills in these defaults.
SUBMIT_DEFAULTS: dict[str, Any] = {"parallelism": 1, "cpu": "1", "gpu": 0, "memory": "1Gi", "pscpu": "1",
                                   "psmemory": "1Gi", "passes": 1, "image": "", "registry": "", "mode": "ps"}


def _submit_setup(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("package", metavar="<package path>", nargs="?", help="local package directory (uploaded) or "
      "/pfs/<dc>/home/<you>/... path (with -from: optional, a /pfs path)")
    a("-from", "--from", dest="from_job", default=None, metavar="JOB", help="submit a copy of your job JOB: its "
      "fields, changed by the flags given here (-env adds to its environment); the name defaults to JOB-2")
    a("-jobname", "--jobname", "-name", help="job name: letters, digits, '-' and '.', e.g. my.job (default: from the "
      "package directory's name)")
    a("-parallelism", "--parallelism", "-p", "-trainers", "--trainers", dest="parallelism", type=int,
      help="number of trainers (default 1)")
    a("-cpu", "--cpu", "-c", help="CPU per trainer, e.g. 1 or 500m (default 1)")
    a("-gpu", "--gpu", "-g", type=int, help="GPUs per trainer (default 0)")
    a("-memory", "--memory", "-m", help="memory per trainer, e.g. 1Gi (default 1Gi)")
    a("-pservers", "--pservers", type=int, default=None,
      help="number of parameter servers (default: same as -parallelism in ps mode)")
    a("-pscpu", "--pscpu", help="CPU per parameter server (default 1)")
    a("-psmemory", "--psmemory", help="memory per parameter server (default 1Gi)")
    a("-entry", "--entry", default=None, help=f"command that starts each process (default: {DEFAULT_ENTRY})")
    a("-topology", "--topology", "-t", default=None, help="deprecated (PaddlePaddle v1 config file): passed as "
      "$TOPOLOGY; the default entry becomes `python <file>`")
    a("-passes", "--passes", type=int, help="number of passes, given to the job as "
      "$PADDLE_INIT_NUM_PASSES (default 1)")
    a("-image", "--image", help="runtime Docker image (default: the datacenter's)")
    a("-registry", "--registry", help="name of your registry (paddlectl registry) to pull -image from")
    a("-mode", "--mode", choices=("ps", "collective"),
      help="ps: parameter servers + trainers (default); collective: trainers only (gloo/nccl)")
    a("-env", "--env", "-e", action="append", default=[], metavar="NAME=VALUE", help="environment variable for "
      "every process (repeatable)")
    a("-timeout", "--timeout", type=int, default=None, help="fail the job after this many seconds of running")
    a("-priority", "--priority", type=int, default=0, help="queued jobs with a higher priority start first "
      "(0 to your quota's maximum; default 0)")
    a("-fail-fast", "--fail-fast", dest="fail_fast", action="store_true", help="fail at once instead of waiting in "
      "the queue when the job does not fit your quota or the datacenter's free capacity now")
    a("-wait", "--wait", action="store_true", help="wait until the job has ended; exit 1 unless it succeeded")
    a("-input", "--input", default=None, metavar="DIR", help="PFS input directory, given to the job as "
      "$PADDLE_INPUT_DIR")
    # `-output DIR` / `--output=DIR` (anything but a format name) lands here; see OutputFlag.
    p.set_defaults(output_dir="")


def io_env(client: Any, input_dir: str | None, output_dir: str | None) -> dict[str, str]:
    """Seeds 000/001's --input/--output: PFS directories the job reads and writes, passed as
    $PADDLE_INPUT_DIR / $PADDLE_OUTPUT_DIR (paddlectl.runtime.input_dir() / output_dir() read
    them). A path not under /pfs is taken inside your home (seed 001 writes /quickstart/input)."""
    env = {}
    for var, path in (("PADDLE_INPUT_DIR", input_dir), ("PADDLE_OUTPUT_DIR", output_dir)):
        if path:
            env[var] = home_path(client, path)
    return env


def home_path(client: Any, path: str) -> str:
    """A PFS directory as seeds 000/001 give one: a /pfs path, or a path inside your home."""
    try:
        return str(client.pfs_path(in_home(client.home(), path)))
    except ValueError as e:
        raise UsageError(str(e)) from None


def env_pairs(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"-env wants NAME=VALUE, got '{item}'")
        env[key] = value
    return env


@command("submit", "Submit job to PaddlePaddle Cloud.", setup=_submit_setup,
         usage="paddlectl submit [options] <package path> | submit -from <job> [options] [<package path>]")
def submit(ctx: Context, args: argparse.Namespace) -> int:
    if args.from_job:
        created = _submit_from(ctx, args)
    else:
        if not args.package:
            raise UsageError("which package? paddlectl submit [options] <package path> (or -from <job>)")
        created = _submit_new(ctx, args)
    if ctx.output in ("table", "wide"):
        copy = f" (a copy of {created['cloned_from']})" if created.get("cloned_from") else ""
        output.say(f"job {created['name']} submitted ({created['state']}){copy}: "
                   f"{output.count(created['pservers'], 'pserver')}, {output.count(created['trainers'], 'trainer')}, "
                   f"package {created['package']}")
        if queue_text(created):
            output.say(f"queued {queue_text(created)}")
    else:
        output.emit(created, ctx.output)
    if args.wait:
        final = ctx.client.wait(created["name"])
        output.say(f"job {final['name']} {final['state']}" + (f": {final['message']}" if final.get("message") else ""),
                   stderr=True)
        return 0 if final["state"] == "Succeeded" else 1
    return 0


def _submit_new(ctx: Context, args: argparse.Namespace) -> dict[str, Any]:
    for key, default in SUBMIT_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    package = args.package
    name = args.jobname or suggest_job_name(Path(package.rstrip("/")).name)
    env = {**io_env(ctx.client, args.input, args.output_dir), **env_pairs(args.env)}
    entry = args.entry
    if args.topology:
        print("warning: -topology is deprecated (PaddlePaddle v1)", file=sys.stderr)
        env.setdefault("TOPOLOGY", args.topology)
        entry = entry or f"python {args.topology}"
    if not entry:
        entry = DEFAULT_ENTRY
        # A local package is at hand: a default that cannot start fails now, not as a job minutes later.
        if not package.startswith("/pfs/") and Path(package).is_dir() and not (Path(package) / "train.py").is_file():
            raise UsageError(f"no -entry given, and {package} has no train.py to run by default: say how the job "
                             "starts, e.g. -entry \"python main.py\"")
    pservers = args.pservers if args.pservers is not None else (args.parallelism if args.mode == "ps" else 0)
    job = PaddleJob(job_name=name, entry_point=entry, trainer_package_path=package,
                    trainers=args.parallelism, pservers=pservers, cpu_nums=args.cpu, gpu_nums=args.gpu,
                    memory=args.memory, pscpu=args.pscpu, psmemory=args.psmemory, passes=args.passes,
                    runtime_image=args.image, registry=args.registry or None, mode=args.mode, env=env,
                    timeout=args.timeout, priority=args.priority, fail_fast=args.fail_fast)
    local = not package.startswith("/pfs/")
    with transfer_progress("Uploading package", enabled=local and ctx.output in ("table", "wide")) as progress:
        created: dict[str, Any] = ctx.client.submit(job, progress=progress)
    return created


# The API's field for each flag of `submit -from`.
_FROM_FIELDS = {"jobname": "name", "parallelism": "trainers", "cpu": "cpu", "gpu": "gpu", "memory": "memory",
                "pservers": "pservers", "pscpu": "pscpu", "psmemory": "psmemory", "entry": "entry",
                "passes": "passes", "image": "image", "registry": "registry", "mode": "mode", "timeout": "timeout"}


def _submit_from(ctx: Context, args: argparse.Namespace) -> dict[str, Any]:
    """A copy of one of your jobs with the fields given as flags changed (validated by the server)."""
    source = get_job(ctx, args.from_job)
    changes = {field: getattr(args, flag) for flag, field in _FROM_FIELDS.items() if getattr(args, flag) is not None}
    if args.package:
        if not args.package.startswith("/pfs/"):
            raise UsageError("with -from the package is a /pfs/... path already in your storage")
        changes["package"] = ctx.client.pfs_path(args.package).rstrip("/")
    env = {**io_env(ctx.client, args.input, args.output_dir), **env_pairs(args.env)}
    if args.topology:
        env.setdefault("TOPOLOGY", args.topology)
    if env:
        changes["env"] = {**(source.get("env") or {}), **env}
    created: dict[str, Any] = ctx.client.clone(args.from_job, **changes)
    return created


# --- get ------------------------------------------------------------------------------------
RESOURCES = {
    "jobs": "jobs", "job": "jobs", "workers": "workers", "worker": "workers", "quota": "quota",
    "registry": "registry", "registries": "registry", "datacenters": "datacenters", "datacenter": "datacenters",
    "events": "events", "event": "events", "cluster": "cluster",
}


def _get_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("resource", metavar="<resource>", help="jobs | workers <job> | quota | registry | datacenters | "
                   "events <job> | cluster")
    p.add_argument("name", nargs="?", help="a job name (workers, events; optional for jobs)")
    p.add_argument("-a", "-all", "--all", action="store_true", help="list all jobs, also those that have ended")


@command("get", "Print resources", setup=_get_setup,
         usage="paddlectl get [options] jobs [-a] [<job>] | workers <job> | quota | registry | datacenters | "
         "events <job> | cluster")
def get(ctx: Context, args: argparse.Namespace) -> int:
    kind = RESOURCES.get(args.resource)
    if kind is None:
        raise UsageError(f"unknown resource '{args.resource}'; use jobs, workers, quota, registry, datacenters, "
                         "events or cluster")
    c, fmt = ctx.client, ctx.output
    if kind == "jobs":
        data = [get_job(ctx, args.name)] if args.name else c.list(all=args.all)
        output.emit(data[0] if args.name and fmt in ("json", "yaml") else data, fmt, JOB_COLUMNS, JOB_WIDE)
    elif kind in ("workers", "events"):
        if not args.name:
            raise UsageError(f"get {kind} needs a job name: paddlectl get {kind} <job>")
        job = get_job(ctx, args.name)
        if kind == "workers":
            output.emit(job.get("replicas", []), fmt, WORKER_COLUMNS, WORKER_WIDE)
        else:
            output.emit(job.get("events", []), fmt, EVENT_COLUMNS, name=lambda e: str(e.get("reason")))
    elif kind == "quota":
        quota = c.quota()
        with contextlib.suppress(PaddlectlError):  # storage accounting is optional for the quota view
            quota["storage"] = c.storage.usage()
        _print_quota(quota, fmt)
    elif kind == "cluster":
        print_cluster(c.cluster(), fmt)
    elif kind == "registry":
        output.emit(c.registries(), fmt, [("NAME", lambda r: r["name"]), ("SERVER", lambda r: r.get("server")),
                                          ("USERNAME", lambda r: r.get("username"))],
                    [("CREATED", lambda r: output.timestamp(r.get("created")))])
    else:
        output.emit(c.datacenters(), fmt, [("NAME", lambda d: d["name"]), ("BACKEND", lambda d: d.get("backend"))],
                    [("DESCRIPTION", lambda d: d.get("description"))])
    return 0


def _jobs_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("-a", "-all", "--all", action="store_true", help="also the jobs that have ended")


@command("jobs", "List running jobs (-a: all). Same as `get jobs`.", setup=_jobs_setup, usage="paddlectl jobs [-a]")
def jobs(ctx: Context, args: argparse.Namespace) -> int:
    output.emit(ctx.client.list(all=args.all), ctx.output, JOB_COLUMNS, JOB_WIDE)
    return 0


def _print_quota(q: dict[str, Any], fmt: str) -> None:
    if fmt in ("json", "yaml", "name"):
        output.emit(q, "json" if fmt == "name" else fmt)
        return
    limits, used = q.get("limits", {}), q.get("used", {})
    rows = [
        {"resource": "cpu", "used": output.cores(used.get("cpu_millicores")),
         "limit": output.cores(limits.get("cpu_millicores"))},
        {"resource": "memory", "used": output.human_bytes(used.get("memory_bytes")),
         "limit": output.human_bytes(limits.get("memory_bytes"))},
        {"resource": "gpu", "used": used.get("gpus"), "limit": limits.get("gpus")},
        {"resource": "running jobs", "used": used.get("running_jobs"), "limit": limits.get("running_jobs")},
        {"resource": "queued jobs", "used": used.get("queued_jobs"), "limit": limits.get("queued_jobs")},
        {"resource": "storage", "used": output.human_bytes(q.get("storage", {}).get("used_bytes")),
         "limit": output.human_bytes(q.get("storage_bytes"))},
    ]
    output.say(f"datacenter {q.get('datacenter')}")
    output.emit(rows, fmt, [("RESOURCE", lambda r: r["resource"]), ("USED", lambda r: r["used"]),
                            ("LIMIT", lambda r: r["limit"])])



# --- logs -----------------------------------------------------------------------------------
def _logs_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="<job>", nargs="?", help="default: your latest job (seed 003)")
    p.add_argument("-n", "-lines", "--lines", type=int, default=None, metavar="N",
                   help="the last N lines of each worker (default 10; with -f: from the beginning)")
    p.add_argument("-f", "-follow", "--follow", action="store_true",
                   help="keep printing new lines until the job has ended")
    p.add_argument("-w", "-worker", "--worker", default=None, metavar="WORKER",
                   help="only this worker, e.g. trainer-0 or pserver-1, or build: the runtime build (pip's output)")
    p.add_argument("-prefix", "--prefix", action=argparse.BooleanOptionalAction, default=None,
                   help="prefix lines with [worker] (default: when showing several workers)")


@command("logs", "Print logs of the job.", setup=_logs_setup, usage="paddlectl logs [-n N] [-f] [-w worker] [<job>]")
def logs(ctx: Context, args: argparse.Namespace) -> int:
    if not args.job:
        args.job = latest_job(ctx)["name"]
    job = get_job(ctx, args.job)
    replicas = [r["name"] for r in job.get("replicas", [])]
    worker = replica_name(args.job, args.worker) if args.worker else None
    if worker and worker not in (BUILD, *replicas):
        raise UsageError(f"job {args.job} has no worker '{args.worker}'; it has: {', '.join([BUILD, *replicas])}")
    prefix = args.prefix if args.prefix is not None else (worker is None and len(replicas) > 1)
    lines = args.lines if args.lines is not None else (None if args.follow else 10)

    def on_job(state: dict[str, Any]) -> None:
        running = sum(r["state"] == "Running" for r in state.get("replicas", []))
        pending = sum(r["state"] == "Pending" for r in state.get("replicas", []))
        why = f" ({state['reason']}: {state['message']})" if state.get("reason") and state.get("message") else ""
        note = f"[paddlectl] job {state['name']} {state['state']}{why}: {running} running, {pending} pending"
        output.console(stderr=True).print(output.printable(note), style="dim")  # rich passes escapes on

    out = sys.stdout
    # On a terminal a log line keeps its colours, tabs and carriage returns (progress bars), and
    # nothing else that would drive the terminal: a job prints what its data or packages say.
    clean = output.is_terminal(out)
    lines_iter = ctx.client.logs(args.job, replica=worker, lines=lines, follow=args.follow,
                                on_job=on_job if args.follow else None)
    try:
        for line in lines_iter:
            text = output.printable(line.text, "\t\r", colours=True) if clean else line.text
            out.write(f"[{output.printable(line.replica)}] {text}\n" if prefix else text + "\n")
            out.flush()
    except NotFound:
        raise NotFound(404, None, f"job '{args.job}' not found (deleted while its logs were read?)") from None
    return 0



# --- kill / delete --------------------------------------------------------------------------
def _kill_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", nargs="+", metavar="<job name>")
    p.add_argument("-rm", "--rm", action="store_true", help="also remove the job from history (with its logs)")


@command("kill", "Stop the job. -rm will remove the job from history.", setup=_kill_setup,
         usage="paddlectl kill [-rm] <job name>")
def kill(ctx: Context, args: argparse.Namespace) -> int:
    for name in args.jobs:
        if args.rm:
            try:
                ctx.client.delete(name)
            except NotFound:
                raise NotFound(404, None, f"job '{name}' not found") from None
            print(f"job {name} deleted")
        else:
            get_job(ctx, name)
            ctx.client.kill(name)
            print(f"job {name} killed")
    return 0



def _names_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", nargs="+", metavar="<job name>")


@command("suspend", "Stop the job and free its resources, keeping it to resume later (SIGTERM first: time to "
         "checkpoint).", setup=_names_setup, usage="paddlectl suspend <job name>...")
def suspend(ctx: Context, args: argparse.Namespace) -> int:
    for name in args.jobs:
        get_job(ctx, name)
        job = ctx.client.suspend(name)
        output.say(f"job {name} {job['state'].lower()}")
    return 0


@command("resume", "Queue a suspended job again; it continues from its checkpoint.", setup=_names_setup,
         usage="paddlectl resume <job name>...")
def resume(ctx: Context, args: argparse.Namespace) -> int:
    for name in args.jobs:
        get_job(ctx, name)
        job = ctx.client.resume(name)
        output.say(f"job {name} resumed ({job['state']})")
    return 0


def _delete_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("resource", metavar="<resource>", help="registry | job")
    p.add_argument("names", nargs="*", metavar="<name>")
    p.add_argument("-name", "--name", dest="flag_name", default=None, help="the name (same as the positional)")


@command("delete", "Delete the specify resource.", setup=_delete_setup,
         usage="paddlectl delete registry <name> | delete job <name>")
def delete(ctx: Context, args: argparse.Namespace) -> int:
    names = list(args.names) + ([args.flag_name] if args.flag_name else [])
    kind = {"registry": "registry", "registries": "registry", "job": "job", "jobs": "job"}.get(args.resource)
    if kind is None:
        raise UsageError(f"cannot delete '{args.resource}': use registry or job")
    if not names:
        raise UsageError(f"which {kind}? paddlectl delete {kind} <name>")
    for name in names:
        try:
            ctx.client.delete_registry(name) if kind == "registry" else ctx.client.delete(name)
        except NotFound:
            raise NotFound(404, None, f"{kind} '{name}' not found") from None
        print(f"{kind} {name} deleted")
    return 0

