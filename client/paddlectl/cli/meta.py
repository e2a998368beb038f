"""About the tool itself: commands, help, flags, completion."""

from __future__ import annotations

import argparse
import sys

from .base import COMMANDS, Context, UsageError, command, top_usage


@command("commands", "list all command names")
def commands(ctx: Context, args: argparse.Namespace) -> int:
    for name in sorted(COMMANDS):
        print(name)
    return 0


def _help_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", nargs="?", metavar="<subcommand>")


@command("help", "describe subcommands and their syntax", setup=_help_setup, usage="paddlectl help [<subcommand>]",
         reads_parsers=True)
def help_(ctx: Context, args: argparse.Namespace) -> int:
    if not args.topic:
        sys.stdout.write(top_usage(ctx.prog))
        return 0
    parser = args._parsers.get(args.topic)
    if parser is None:
        raise UsageError(f"no subcommand '{args.topic}'; see `paddlectl commands`")
    parser.print_help(sys.stdout)
    return 0


@command("flags", "describe the top-level flags")
def flags(ctx: Context, args: argparse.Namespace) -> int:
    print("Top-level flags (also accepted after any subcommand):\n"
          "  -datacenter NAME   datacenter entry of ~/.paddle/config to use (default: current-datacenter)\n"
          "  -config PATH       config file (default: $PADDLE_CONFIG or ~/.paddle/config)\n"
          "  -o FORMAT          output: table (default), wide, json, yaml or name\n"
          "                     (submit takes -output DIR, anything but a format, as the job's output directory)\n"
          "  -h, -help          this help; `paddlectl help <subcommand>` for a subcommand's flags\n"
          "  -version           print the client version\n\n"
          "Environment: PADDLE_CONFIG, PADDLECTL_DATACENTER, PADDLECTL_ENDPOINT, PADDLECTL_TOKEN,\n"
          "PADDLECTL_USERNAME, PADDLECTL_PASSWORD (with PADDLECTL_ENDPOINT no config file is needed).")
    return 0


def _flags_of(parser: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    for action in parser._actions:
        out.extend(s for s in action.option_strings if not s.startswith("--") or len(action.option_strings) == 1)
    return sorted(set(out))


BASH = r"""# paddlectl bash completion: source <(paddlectl completion bash)
_paddlectl() {
    local cur prev words cword
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    local cmd="" i
    for ((i=1; i<COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break;; esac
    done
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W "%(commands)s" -- "$cur")); return
    fi
    case "$prev" in
        -o|-output|--output) COMPREPLY=($(compgen -W "table wide json yaml name" -- "$cur")); return;;
        -mode|--mode) COMPREPLY=($(compgen -W "ps collective" -- "$cur")); return;;
        -datacenter|--datacenter) return;;
    esac
    if [[ "$cur" == -* ]]; then
        case "$cmd" in
%(flag_cases)s
        esac
        return
    fi
    case "$cmd" in
        get) if [[ "$prev" == get ]]; then
                 COMPREPLY=($(compgen -W "jobs workers quota registry datacenters events" -- "$cur"))
             else
                 COMPREPLY=($(compgen -W "$(%(prog)s get jobs -a -o name 2>/dev/null)" -- "$cur"))
             fi;;
        logs|kill) COMPREPLY=($(compgen -W "$(%(prog)s get jobs -a -o name 2>/dev/null)" -- "$cur"));;
        delete) if [[ "$prev" == delete ]]; then COMPREPLY=($(compgen -W "registry job" -- "$cur")); fi;;
        help) COMPREPLY=($(compgen -W "%(commands)s" -- "$cur"));;
        completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur"));;
        submit|cp|file) COMPREPLY=($(compgen -f -- "$cur"));;
    esac
}
complete -o default -F _paddlectl %(prog)s
"""

ZSH = """# paddlectl zsh completion: source <(paddlectl completion zsh)
autoload -U +X bashcompinit && bashcompinit
autoload -U +X compinit && compinit
"""


def script(shell: str, parsers: dict[str, argparse.ArgumentParser], prog: str = "paddlectl") -> str:
    names = " ".join(sorted(COMMANDS))
    cases = "\n".join(f"            {name}) COMPREPLY=($(compgen -W \"{' '.join(_flags_of(parsers[name]))}\" "
                      f"-- \"$cur\"));;" for name in sorted(COMMANDS))
    bash = BASH % {"commands": names, "flag_cases": cases, "prog": prog}
    return bash if shell == "bash" else ZSH + bash


def _completion_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=("bash", "zsh"))


@command("completion", "print a shell completion script (bash or zsh)", setup=_completion_setup,
         usage="paddlectl completion bash|zsh   (e.g. source <(paddlectl completion bash))", reads_parsers=True)
def completion(ctx: Context, args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.shell, args._parsers, ctx.prog))
    return 0
