"""What every command module builds on: the command registry (`@command`), the Context a command
runs with, the global flags and the usage text. main.py parses and dispatches; the command modules
(account, files, jobs, meta, webhooks) register here, so none of them imports main.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .. import config as cfgmod

if TYPE_CHECKING:
    from ..sdk import Client

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
    reads_parsers: bool = False  # it reads every subcommand's parser (args._parsers): help, completion


COMMANDS: dict[str, Command] = {}
_Run = TypeVar("_Run", bound="Callable[[Context, argparse.Namespace], int | None]")


def _no_setup(parser: argparse.ArgumentParser) -> None:
    pass


def command(name: str, summary: str, *, setup: Callable[[argparse.ArgumentParser], None] = _no_setup,
            group: str = "main", usage: str | None = None, aliases: tuple[str, ...] = (),
            reads_parsers: bool = False) -> Callable[[_Run], _Run]:
    """Register `run(ctx, args)` as a subcommand whose flags `setup(parser)` adds."""

    def wrap(run: _Run) -> _Run:
        COMMANDS[name] = Command(name, summary, setup, run, group, usage, aliases, reads_parsers)
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
        self._client: Client | None = None
        self._warned = False

    def config(self) -> cfgmod.Config:
        cfg = cfgmod.load(self.config_path)
        if not self._warned:
            cfgmod.warn_if_readable(cfg)
            self._warned = True
        return cfg

    @property
    def client(self) -> Client:
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
    def error(self, message: str) -> Any:
        words = self.prog.split()
        hint = f"{words[0]} help {words[1]}" if len(words) > 1 else f"{words[0]} help"
        raise UsageError(f"{self.prog}: {message}\nRun '{hint}' for usage.")


def top_usage(prog: str = "paddlectl") -> str:
    def block(group: str) -> str:
        return "\n".join(f"\t{c.name:<16} {c.summary}" for c in sorted(COMMANDS.values(), key=lambda c: c.name)
                         if c.group == group and not c.name.startswith("_"))

    return (f"Usage: {prog} <flags> <subcommand> <subcommand args>\n\nSubcommands:\n{block('main')}\n\n"
            f"Subcommands for PFS:\n{block('pfs')}\n\n\n"
            f'Use "{prog} flags" for a list of top-level flags\n')
