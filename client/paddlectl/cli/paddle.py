"""`paddle`: the command forms of seeds 000 and 001, over the same SDK as `paddlectl`.

    paddle job submit --job-name=cluster-quickstart --package-path=$PWD/quick_start \\
        --entry-point="python train.py" --input=<input-dir> --output=<output-dir> \\
        --trainers=4 --pservers=2 --base-image=<paddle-image> --use-gpu=true --trainer-gpu-num=1 \\
        --env="NUM_PASS=5"
    paddle train | list | cancel | status | version | upload | download     (seed 001)
    paddle k8s job <job-name> --package-path=./demo --module=demo.train \\
        --pserver-count=2 --trainer-count=4 --output=<dir> --input=<dir>    (seed 000)

Here `--output` is always a directory; the output format is `-o FORMAT` (or `--format`). Every
other word (`paddle logs`, `paddle get workers`, `paddle cp`, `paddle login`...) is paddlectl's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import NotFound, PaddlectlError
from ..job import PaddleJob, suggest_job_name
from . import output
from .base import EXIT_ERROR, EXIT_USAGE, FORMAT_CHOICES, Context, Parser, UsageError
from .jobs import JOB_COLUMNS, JOB_WIDE, WORKER_COLUMNS, WORKER_WIDE, env_pairs, get_job, home_path, io_env
from .main import main as paddlectl_main
from .progress import transfer_progress

PROG = "paddle"
TRUE, FALSE = ("true", "1", "yes", "y", "on"), ("false", "0", "no", "n", "off")
MPI_MESSAGE = ("paddle mpi: this PaddleCloud runs jobs through its datacenters' backends (local processes or "
               "Kubernetes), not through MPI. Submit with `paddle job submit ...` or `paddle k8s job ...`; "
               "`paddle get datacenters` lists the datacenters.")


def _flag(value: str) -> bool:
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"'{value}' is not true or false")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-h", "--help", action="help", help="show this help")
    p.add_argument("--datacenter", "-datacenter", default=argparse.SUPPRESS, metavar="NAME",
                   help="datacenter entry of the config to use")
    p.add_argument("--config", "-config", default=argparse.SUPPRESS, metavar="PATH",
                   help="config file (default: $PADDLE_CONFIG or ~/.paddle/config)")
    p.add_argument("-o", "--format", dest="output", choices=FORMAT_CHOICES, default=argparse.SUPPRESS,
                   metavar="FORMAT", help="output format: table (default), wide, json, yaml or name")


def _resources(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--base-image", default="", metavar="IMAGE", help="trainer Docker image (default: the datacenter's); pulled "
      "with the dockerRegistry credentials of a seed-001 config when it comes from that registry")
    a("--cpu", default="1", help="CPU per process (default 1)")
    a("--memory", default="1Gi", help="memory per process (default 1Gi)")
    a("--env", action="append", default=[], metavar="NAME=VALUE", help="environment variable (repeatable)")
    a("--wait", action="store_true", help="wait until the job has ended; exit 1 unless it succeeded")


def _submit_setup(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--job-name", default=None, help="a unique job name (default: from the package directory's name)")
    a("--package-path", required=True, help="the package directory on your machine (or a /pfs/... path)")
    a("--entry-point", default="python train.py", help='command that starts each process (default "python '
      'train.py")')
    a("--input", default=None, metavar="DIR", help="input directory on PFS, given to the job as $PADDLE_INPUT_DIR")
    a("--output", dest="output_dir", default=None, metavar="DIR",
      help="output directory on PFS, given to the job as $PADDLE_OUTPUT_DIR")
    a("--trainers", type=int, default=1, help="trainer process count (default 1)")
    a("--pservers", "--pserver", type=int, default=None, help="parameter server count (default: --trainers)")
    a("--use-gpu", type=_flag, nargs="?", const=True, default=False, metavar="true|false", help="GPU training")
    a("--trainer-gpu-num", type=int, default=1, help="GPUs per trainer with --use-gpu=true (default 1)")
    _resources(p)


def _k8s_job_setup(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("job_name", metavar="<job-name>", help="a unique name for the job")
    a("--package-path", "--pcakage-path", required=True, help="your package directory (seed 000 also spells it "
      "--pcakage-path)")
    a("--module", "--module-name", required=True, help="module with the main function: --module demo.train runs "
      "`python -m demo.train` beside the package directory demo/")
    a("--pserver-count", type=int, default=1, help="parameter server processes (default 1)")
    a("--trainer-count", type=int, default=1, help="trainer processes (default 1)")
    a("--input", default=None, metavar="DIR", help="input directory on PFS ($PADDLE_INPUT_DIR in the job)")
    a("--output", dest="output_dir", default=None, metavar="DIR",
      help="output directory on PFS ($PADDLE_OUTPUT_DIR in the job)")
    _resources(p)


def _names_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", nargs="+", metavar="<job-name>")


def _status_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="<job-name>")


def _list_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("-a", "--all", action="store_true", default=True, help="all jobs (the default)")
    p.add_argument("--running", dest="all", action="store_false", help="only the jobs that have not ended")


def _transfer_setup(src: str, dest: str) -> Any:
    def setup(p: argparse.ArgumentParser) -> None:
        p.add_argument("paths", nargs="+", metavar=f"{src} ... {dest}")

    return setup


SUBMIT_USAGE = ("paddle job submit --job-name=NAME --package-path=DIR [--entry-point=CMD] [--input=DIR] "
                "[--output=DIR] [--trainers=N] [--pservers=N] [--base-image=IMAGE] [--use-gpu=true|false] "
                "[--trainer-gpu-num=N] [--env=NAME=VALUE ...]")
K8S_USAGE = ("paddle k8s job <job-name> --package-path=DIR --module=PKG.MODULE [--pserver-count=N] "
             "[--trainer-count=N] [--input=DIR] [--output=DIR]")
# name -> (summary, setup, usage)
COMMANDS: dict[str, tuple[str, Any, str]] = {
    "submit": ("submit a distributed training job", _submit_setup, SUBMIT_USAGE),
    "train": ("start a training job (same as job submit)", _submit_setup, SUBMIT_USAGE.replace("job submit", "train")),
    "list": ("list all your jobs", _list_setup, "paddle list [--running]"),
    "cancel": ("cancel a running job", _names_setup, "paddle cancel <job-name> ..."),
    "status": ("status of a job and its processes", _status_setup, "paddle status <job-name>"),
    "version": ("client, server and PaddlePaddle versions", lambda p: None, "paddle version"),
    "upload": ("upload training data into a PFS directory", _transfer_setup("<local>", "<pfs dir>"),
               "paddle upload <local file or dir> ... <pfs dir>   (/pfs/<dc>/home/<you>/<dir>, or <dir> in your home)"),
    "download": ("download data from PFS into a local directory", _transfer_setup("<pfs path>", "<local dir>"),
                 "paddle download <pfs path> ... <local dir>   (/pfs/<dc>/home/<you>/<path>, or <path> in your "
                 "home)"),
}


def build_parser() -> Parser:
    top = Parser(prog=PROG, add_help=False, allow_abbrev=False, description=__doc__.split("\n\n")[0],
                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=USAGE_EPILOG)
    _common(top)
    sub = top.add_subparsers(dest="command", metavar="<command>", parser_class=Parser)

    def add(group: Any, name: str, summary: str, setup: Any, usage: str, action: str | None = None) -> None:
        p = group.add_parser(name, help=summary, description=summary, usage=usage, add_help=False,
                             allow_abbrev=False)
        _common(p)
        setup(p)
        p.set_defaults(action=action or name)

    job = sub.add_parser("job", help="job submit | train | list | cancel | status", add_help=False,
                         usage="paddle job {submit,train,list,cancel,status} ...")
    _common(job)
    job_sub = job.add_subparsers(dest="job_command", metavar="<job command>", parser_class=Parser, required=True)
    for name, (summary, setup, usage) in COMMANDS.items():
        if name in ("submit", "train", "list", "cancel", "status"):
            add(job_sub, name, summary, setup, usage)
        if name != "submit":
            add(sub, name, summary, setup, usage)
    k8s = sub.add_parser("k8s", help="seed 000's form: k8s job <job-name> ...", add_help=False, usage=K8S_USAGE)
    _common(k8s)
    add(k8s.add_subparsers(dest="k8s_command", metavar="job", parser_class=Parser, required=True), "job",
        "submit a job on the datacenter's cluster", _k8s_job_setup, K8S_USAGE, action="k8s-job")
    return top


USAGE_EPILOG = f"""forms:
  {SUBMIT_USAGE}
  {K8S_USAGE}
  paddle train | list | cancel | status | version | upload | download   (paddle <command> -h for its flags)

--output is always a PFS directory here; the output format is -o FORMAT.
Every other paddlectl command works too: paddle logs <job>, paddle get workers <job>, paddle login, ...
"""
OWN = {"job", "train", "list", "cancel", "status", "version", "upload", "download", "k8s"}
VALUE_FLAGS = {"--datacenter", "-datacenter", "--config", "-config", "-o", "--format"}


def _command_word(argv: list[str]) -> str | None:
    """The first word that is not a top-level flag or its value."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in VALUE_FLAGS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _seed_spellings(argv: list[str]) -> list[str]:
    """The seeds' flag spellings as argparse reads them: seed 001's `--base-image:<paddle-image>`
    is `--base-image=<paddle-image>`, and seed 000's `--package-path= ./demo` (a space after
    the `=`) gives the next word as the value."""
    out: list[str] = []
    for arg in argv:
        head, sep, _ = arg.partition(":")
        if sep and head.startswith("--") and "=" not in head:
            arg = arg.replace(":", "=", 1)
        if out and out[-1].startswith("--") and out[-1].endswith("=") and out[-1].count("=") == 1 \
                and not arg.startswith("-"):
            out[-1] += arg
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    argv = _seed_spellings(list(sys.argv[1:] if argv is None else argv))
    word = _command_word(argv)
    if word == "mpi":
        print(MPI_MESSAGE, file=sys.stderr)
        return EXIT_ERROR
    if word is None and not {"-h", "--help", "-help"} & set(argv):
        build_parser().print_help(sys.stderr)
        return EXIT_USAGE
    if word is not None and word not in OWN:
        return paddlectl_main(argv, prog)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # -h
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_USAGE
    ctx = Context(args, prog)
    try:
        return int(ACTIONS[args.action](ctx, args) or 0)
    except UsageError as e:
        print(f"{prog} {args.action}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (PaddlectlError, ValueError, TimeoutError, OSError) as e:
        print(f"error: {output.printable(str(e), chr(10))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        ctx.close()


def run() -> None:
    """Console-script entry point of `paddle`."""
    from .main import run as run_cli

    run_cli(PROG, main)


# --- actions ----------------------------------------------------------------------------------
def registry_for(ctx: Context, image: str) -> str | None:
    """The server-side registry holding a seed-001 config's dockerRegistry credentials, when
    `image` comes from that registry; created on first use. Its name depends on the credentials,
    so a changed password gets a new registry and jobs still queued keep theirs."""
    reg = ctx.config().docker_registry
    if not image or reg is None or not reg.username or not reg.password:
        return None
    first = image.split("/", 1)[0]
    host = first if "/" in image and ("." in first or ":" in first or first == "localhost") else "docker.io"
    if host != reg.domain:
        return None
    digest = hashlib.sha256(f"{reg.domain}\0{reg.username}\0{reg.password}".encode()).hexdigest()[:10]
    name = f"paddle-config-{digest}"
    if not any(r["name"] == name for r in ctx.client.registries()):
        ctx.client.add_registry(name, reg.domain, reg.username, reg.password)
    return name


def _submit(ctx: Context, args: argparse.Namespace, job: PaddleJob, nest_as: str | None = None) -> int:
    job.env = {**io_env(ctx.client, args.input, args.output_dir), **env_pairs(args.env)}
    job.registry = registry_for(ctx, job.runtime_image)
    local = not str(job.package).startswith("/pfs/")
    with transfer_progress("Uploading package", enabled=local and ctx.output in ("table", "wide")) as progress:
        created = ctx.client.submit(job, progress=progress, nest_as=nest_as)
    if ctx.output in ("table", "wide"):
        output.say(f"job {created['name']} submitted ({created['state']}): {created['pservers']} pservers, "
                   f"{created['trainers']} trainers, package {created['package']}, entry {created['entry']}")
    else:
        output.emit(created, ctx.output)
    if not args.wait:
        return 0
    final = ctx.client.wait(created["name"])
    output.say(f"job {final['name']} {final['state']}" + (f": {final['message']}" if final.get("message") else ""),
               stderr=True)
    return 0 if final["state"] == "Succeeded" else 1


def submit(ctx: Context, args: argparse.Namespace) -> int:
    package = args.package_path
    job = PaddleJob(job_name=args.job_name or suggest_job_name(Path(package.rstrip("/")).name),
                    entry_point=args.entry_point, trainer_package_path=package, trainers=args.trainers,
                    pservers=args.trainers if args.pservers is None else args.pservers, cpu_nums=args.cpu,
                    memory=args.memory, pscpu=args.cpu, psmemory=args.memory, runtime_image=args.base_image,
                    gpu_nums=args.trainer_gpu_num if args.use_gpu else 0)
    return _submit(ctx, args, job)


def k8s_job(ctx: Context, args: argparse.Namespace) -> int:
    """Seed 000: `--module demo.train` with `--package-path ./demo` runs `python -m demo.train` in a
    directory holding demo/, as you would from demo's parent directory."""
    package, module = args.package_path, args.module
    top = module.split(".", 1)[0]
    nest_as = top if not package.startswith("/pfs/") and Path(package).resolve().name == top else None
    job = PaddleJob(job_name=args.job_name, entry_point=f"python -m {module}", trainer_package_path=package,
                    trainers=args.trainer_count, pservers=args.pserver_count, cpu_nums=args.cpu, memory=args.memory,
                    pscpu=args.cpu, psmemory=args.memory, runtime_image=args.base_image)
    return _submit(ctx, args, job, nest_as)


def list_jobs(ctx: Context, args: argparse.Namespace) -> int:
    output.emit(ctx.client.list(all=args.all), ctx.output, JOB_COLUMNS, JOB_WIDE)
    return 0


def cancel(ctx: Context, args: argparse.Namespace) -> int:
    for name in args.jobs:
        get_job(ctx, name)
        ctx.client.kill(name)
        print(f"job {name} cancelled")
    return 0


def status(ctx: Context, args: argparse.Namespace) -> int:
    job = get_job(ctx, args.job)
    if ctx.output not in ("table", "wide"):
        output.emit(job, ctx.output)
        return 0
    why = f" ({job['reason']}: {job['message']})" if job.get("reason") and job.get("message") else ""
    place = f" #{job['queue_position']} in the queue" if job["state"] == "Queued" and job.get("queue_position") else ""
    output.say(f"job {job['name']}: {job['state']}{place}{why}")
    output.emit(job.get("replicas", []), ctx.output, WORKER_COLUMNS, WORKER_WIDE)
    return 0


def paddlepaddle_version() -> str | None:
    """The PaddlePaddle installed beside this client, read from its metadata (not imported)."""
    for dist in ("paddlepaddle", "paddlepaddle-gpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def version(ctx: Context, args: argparse.Namespace) -> int:
    info: dict[str, Any] = {"client": __version__, "server": None, "paddlepaddle": paddlepaddle_version()}
    try:
        info["server"] = ctx.client.version()["server"]
    except PaddlectlError as e:
        print(f"server: {str(e).splitlines()[0]}", file=sys.stderr)
    if ctx.output not in ("table", "wide"):
        output.emit(info, ctx.output)
    else:
        print(f"PaddlePaddle client (paddlectl) {info['client']}")
        print(f"PaddleCloud server {info['server'] or 'unknown'}")
        if info["paddlepaddle"]:
            print(f"PaddlePaddle {info['paddlepaddle']} (installed here)")
    return 0 if info["server"] else EXIT_ERROR


def _transfer(ctx: Context, sources: list[str], dest: str, sep: str) -> int:
    """`cp -r` into the destination as a directory, made if missing."""
    from .files import cp

    return cp(ctx, argparse.Namespace(paths=[*sources, dest.rstrip(sep) + sep], recursive=True))


def upload(ctx: Context, args: argparse.Namespace) -> int:
    """The destination is a PFS directory as --input takes one: a /pfs path, or a path inside
    your home (`paddle upload a.csv /quickstart/input`)."""
    *sources, dest = args.paths
    if not sources:
        raise UsageError("paddle upload <local file or dir> ... <pfs dir: /pfs/... or inside your home>")
    return _transfer(ctx, sources, home_path(ctx.client, dest), "/")


def download(ctx: Context, args: argparse.Namespace) -> int:
    """Each source is a PFS path, /pfs/... or inside your home, as upload takes them."""
    *sources, dest = args.paths
    if not sources:
        raise UsageError("paddle download <pfs path: /pfs/... or inside your home> ... <local dir>")
    remote = [home_path(ctx.client, s) for s in sources]
    try:
        return _transfer(ctx, remote, dest, os.sep)
    except NotFound as e:
        raise NotFound(404, None, f"{' '.join(sources)}: not found ({e})") from None


ACTIONS = {"submit": submit, "train": submit, "k8s-job": k8s_job, "list": list_jobs, "cancel": cancel,
           "status": status, "version": version, "upload": upload, "download": download}


if __name__ == "__main__":  # `python -m paddlectl.cli.paddle`, when another `paddle` owns bin/paddle
    run()
