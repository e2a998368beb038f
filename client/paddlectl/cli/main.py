"""`paddlectl`: the command line. Flags are Go-style single-dash (`-jobname x`, as in the seed
documents and existing users' scripts); the double-dash spellings work too. `paddlecloud` (seed
003's name) is the same command line under another name.

Exit codes: 0 success, 1 error (the server's message is printed, never a traceback), 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import __version__
from .. import config as cfgmod
from ..errors import NotFound, PaddlectlError

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


@dataclass
class Command:
    name: str
    summary: str
    setup: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Context, argparse.Namespace], int | None]
    group: str = "main"  # "main" or "pfs"
    usage: str | None = None
    aliases: tuple[str, ...] = ()


COMMANDS: dict[str, Command] = {}


def _no_setup(parser: argparse.ArgumentParser) -> None:
    pass


def command(name: str, summary: str, *, setup: Callable[[argparse.ArgumentParser], None] = _no_setup,
            group: str = "main", usage: str | None = None,
            aliases: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `run(ctx, args)` as a subcommand whose flags `setup(parser)` adds."""

    def wrap(run: Callable[..., Any]) -> Callable[..., Any]:
        COMMANDS[name] = Command(name, summary, setup, run, group, usage, aliases)
        return run

    return wrap


class UsageError(Exception):
    """Wrong arguments: exit code 2."""


class Context:
    """What a command needs: the parsed global flags and a client built on first use."""

    def __init__(self, args: argparse.Namespace, prog: str = "paddlectl"):
        self.args = args
        self.prog = prog
        self.output: str = getattr(args, "output", None) or "table"
        self.datacenter: str | None = getattr(args, "datacenter", None)
        self.config_path: str | None = getattr(args, "config", None)
        self._client: Any = None
        self._warned = False

    def config(self) -> cfgmod.Config:
        cfg = cfgmod.load(self.config_path)
        if not self._warned:
            cfgmod.warn_if_readable(cfg)
            self._warned = True
        return cfg

    @property
    def client(self) -> Any:
        if self._client is None:
            from ..sdk import Client

            cfg = self.config()
            self._client = Client.from_config(self.datacenter, cfg.path)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def add_global_flags(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a flag given before the subcommand is not reset by the subcommand's parser.
    parser.add_argument("-datacenter", "--datacenter", default=argparse.SUPPRESS, metavar="NAME",
                        help="datacenter entry of the config to use (default: current-datacenter)")
    parser.add_argument("-config", "--config", default=argparse.SUPPRESS, metavar="PATH",
                        help="config file (default: $PADDLE_CONFIG or ~/.paddle/config)")
    parser.add_argument("-o", "-output", "--output", default=argparse.SUPPRESS, action=OutputFlag,
                        metavar="FORMAT",
                        help="output format: table (default), wide, json, yaml or name")


FORMAT_CHOICES = ("table", "wide", "json", "yaml", "name")


class OutputFlag(argparse.Action):
    """`-o FORMAT`, and also `--output DIR` where a command takes an output directory (seeds
    000/001 spell it so): a format name is the format, anything else the directory."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values in FORMAT_CHOICES:
            namespace.output = values
        elif option_string != "-o" and parser.get_default("output_dir") is not None:
            namespace.output_dir = values
        else:
            parser.error(f"argument {option_string}: '{values}' is not an output format (choose from "
                         f"{', '.join(FORMAT_CHOICES)})")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        words = self.prog.split()
        hint = f"{words[0]} help {words[1]}" if len(words) > 1 else f"{words[0]} help"
        raise UsageError(f"{self.prog}: {message}\nRun '{hint}' for usage.")


def build_parser(prog: str = "paddlectl") -> tuple[Parser, dict[str, Parser]]:
    from . import account, files, jobs, meta, webhooks  # noqa: F401  (registers the commands)

    top = Parser(prog=prog, add_help=False, allow_abbrev=False)
    add_global_flags(top)
    top.add_argument("-h", "-help", "--help", action="store_true", dest="top_help", default=False)
    top.add_argument("-version", "--version", action="store_true", dest="top_version", default=False)
    sub = top.add_subparsers(dest="command", metavar="<subcommand>", parser_class=Parser)
    parsers: dict[str, Parser] = {}
    for cmd in COMMANDS.values():
        usage = cmd.usage.replace("paddlectl", prog, 1) if cmd.usage else None
        p = sub.add_parser(cmd.name, aliases=list(cmd.aliases), help=cmd.summary, description=cmd.summary,
                           usage=usage, allow_abbrev=False, add_help=False)
        p.add_argument("-h", "-help", "--help", action="help", help="show this help")
        add_global_flags(p)
        cmd.setup(p)
        parsers[cmd.name] = p
        for alias in cmd.aliases:
            parsers[alias] = p
    return top, parsers


def top_usage(prog: str = "paddlectl") -> str:
    def block(group: str) -> str:
        return "\n".join(f"\t{c.name:<16} {c.summary}" for c in sorted(COMMANDS.values(), key=lambda c: c.name)
                         if c.group == group and not c.name.startswith("_"))

    return (f"Usage: {prog} <flags> <subcommand> <subcommand args>\n\nSubcommands:\n{block('main')}\n\n"
            f"Subcommands for PFS:\n{block('pfs')}\n\n\n"
            f'Use "{prog} flags" for a list of top-level flags\n')


def _say_error(message: str) -> None:
    message = message.strip()
    print(f"error: {message}" if "\n" not in message else "error: " + message.replace("\n", "\n  "),
          file=sys.stderr)


def main(argv: Sequence[str] | None = None, prog: str = "paddlectl") -> int:
    """Run one command; returns the exit code (tests call this in-process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "pfs":  # seed 003: `paddlecloud pfs cp ...`
        argv = argv[1:]
    try:
        top, parsers = build_parser(prog)
        args = top.parse_args(argv)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:  # -h inside a subcommand
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_USAGE
    if args.top_version and not args.command:
        print(f"{prog} {__version__}")
        return EXIT_OK
    if args.top_help or not args.command:
        sys.stdout.write(top_usage(prog)) if args.top_help else sys.stderr.write(top_usage(prog))
        return EXIT_OK if args.top_help else EXIT_USAGE
    name = args.command
    cmd = COMMANDS.get(name) or next(c for c in COMMANDS.values() if name in c.aliases)
    ctx = Context(args, prog)
    args._parsers = parsers
    try:
        return int(cmd.run(ctx, args) or 0)
    except UsageError as e:
        print(f"{prog} {cmd.name}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except NotFound as e:
        _say_error(str(e) if str(e) not in ("Not found.", "No Job matches the given query.") else "not found")
        return EXIT_ERROR
    except (PaddlectlError, ValueError, TimeoutError, OSError) as e:
        if os.environ.get("PADDLECTL_DEBUG"):
            raise
        _say_error(str(e) or type(e).__name__)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        ctx.close()


def run(prog: str = "paddlectl", entry: Callable[..., int] | None = None) -> None:
    """Console-script entry point of `paddlectl`."""
    try:
        code = (entry or main)(None, prog)
    except BrokenPipeError:  # `paddlectl logs job | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass
        code = 0
    sys.exit(code)


def run_paddlecloud() -> None:
    """Console-script entry point of `paddlecloud` (seed 003's name for the same client)."""
    run("paddlecloud")
