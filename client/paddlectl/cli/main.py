"""`paddlectl`: the command line. Flags are Go-style single-dash (`-jobname x`, as in the seed
documents and existing users' scripts); the double-dash spellings work too. `paddlecloud` (seed
003's name) is the same command line under another name.

Exit codes: 0 success, 1 error (the server's message is printed, never a traceback), 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..errors import NotFound, PaddlectlError
from .base import COMMANDS, EXIT_ERROR, EXIT_OK, EXIT_USAGE, Context, Parser, UsageError, add_global_flags, top_usage


def build_parser(prog: str = "paddlectl", only: str | None = None) -> tuple[Parser, dict[str, Parser]]:
    """The command line's parser and each subcommand's, by name and alias; with `only` (a
    command's name), a parser that knows that subcommand alone."""
    from . import account, files, jobs, meta, webhooks  # noqa: F401  (registers the commands)

    top = Parser(prog=prog, add_help=False, allow_abbrev=False)
    add_global_flags(top)
    top.add_argument("-h", "-help", "--help", action="store_true", dest="top_help", default=False)
    top.add_argument("-version", "--version", action="store_true", dest="top_version", default=False)
    sub = top.add_subparsers(dest="command", metavar="<subcommand>", parser_class=Parser)
    parsers: dict[str, Parser] = {}
    for cmd in COMMANDS.values():
        if only is not None and cmd.name != only:
            continue
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


def _parse(argv: list[str], prog: str) -> tuple[argparse.Namespace, dict[str, Parser]]:
    """The parsed command line and the parsers made for it: by a parser that knows only the
    subcommand a word of `argv` names, if one does (making them all is part of every command's
    start: bench/cli_start.py), else, or where that one fails, by the whole parser, so that
    every error reads as it always did. A wrong guess cannot parse: argparse would find in
    `argv` a subcommand it does not know."""
    from . import account, files, jobs, meta, webhooks  # noqa: F401  (registers the commands)

    names = {alias: cmd.name for cmd in COMMANDS.values() for alias in (cmd.name, *cmd.aliases)}
    guess = next((names[word] for word in argv if word in names), None)
    if guess is not None:
        top, parsers = build_parser(prog, only=guess)
        try:
            return top.parse_args(argv), parsers
        except UsageError:
            pass
    top, parsers = build_parser(prog)
    return top.parse_args(argv), parsers


def _say_error(message: str) -> None:
    from .output import printable

    message = printable(message.strip(), "\n")  # the server's words: never a terminal escape
    print(f"error: {message}" if "\n" not in message else "error: " + message.replace("\n", "\n  "),
          file=sys.stderr)


def _say_usage(message: str) -> None:
    from .output import printable

    print(printable(message, "\n"), file=sys.stderr)  # may name a worker the server listed


def main(argv: Sequence[str] | None = None, prog: str = "paddlectl") -> int:
    """Run one command; returns the exit code (tests call this in-process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Piped, Python buffers stdout in blocks while stderr (progress, errors) goes out at once: each
    # line goes out as printed, so `2>&1 | tee` shows both in the order they happened.
    if not sys.stdout.isatty() and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    if argv and argv[0] == "pfs":  # seed 003: `paddlecloud pfs cp ...`
        argv = argv[1:]
    try:
        args, parsers = _parse(argv, prog)
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
    args._parsers = build_parser(prog)[1] if cmd.reads_parsers else parsers
    try:
        return int(cmd.run(ctx, args) or 0)
    except UsageError as e:
        _say_usage(f"{prog} {cmd.name}: {e}")
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
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        code = 0
    sys.exit(code)


def run_paddlecloud() -> None:
    """Console-script entry point of `paddlecloud` (seed 003's name for the same client)."""
    run("paddlecloud")
