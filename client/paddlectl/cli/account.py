"""Account commands: login, logout, tokens, registry, version, config."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from .. import __version__
from .. import config as cfgmod
from ..errors import AuthError, ConfigError, PaddlectlError
from . import output
from .base import Context, UsageError, command


def _prompt(label: str, secret: bool = False) -> str:
    if not sys.stdin or not sys.stdin.isatty():
        raise UsageError(f"no {label} given (use -{label}, or run in a terminal to be asked)")
    return getpass.getpass(f"{label.capitalize()}: ") if secret else input(f"{label.capitalize()}: ")


def _stdin_password() -> str:
    """The first line of standard input, without its line ending (a script's `echo` adds one)."""
    line = sys.stdin.readline() if sys.stdin else ""
    password = line.rstrip("\r\n")
    if not password:
        raise UsageError("-password-stdin: standard input held no password")
    return password


def _login_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("-endpoint", "--endpoint", help="server URL, e.g. http://cloud.example.com (default: the entry's)")
    p.add_argument("-username", "--username", "-u", help="your user name (default: the entry's)")
    p.add_argument("-password", "--password", help="your password (default: $PADDLECTL_PASSWORD, the entry's, or "
                   "asked); -password-stdin keeps it off the command line")
    p.add_argument("-password-stdin", "--password-stdin", action="store_true",
                   help="read the password from standard input (its first line), as `docker login` does: "
                        "printf %%s \"$PASSWORD\" | paddlectl login -password-stdin")
    p.add_argument("-name", "--name", help="config entry to log in with (default: the current datacenter)")
    p.add_argument("-device", "--device", help="this machine's name for its token (default: the config's, else the "
                   "host name); logging in again from it replaces its token")


@command("login", "Log in and store an API token in the config instead of the password.", setup=_login_setup,
         usage="paddlectl login [-endpoint URL] [-username NAME] [-password PASSWORD | -password-stdin] "
         "[-name DATACENTER] [-device NAME]")
def login(ctx: Context, args: argparse.Namespace) -> int:
    cfg = ctx.config()
    name = args.name or ctx.datacenter or os.environ.get(cfgmod.ENV_DATACENTER) or cfg.current
    if not name and len(cfg.datacenters) == 1:
        name = cfg.datacenters[0].name
    entry = cfg.find(name) if name else None
    endpoint = args.endpoint or os.environ.get(cfgmod.ENV_ENDPOINT) or (entry.endpoint if entry else None)
    if not endpoint:
        raise ConfigError(f"which server? pass -endpoint URL (no datacenter entry '{name or ''}' in {cfg.path})")
    username = args.username or os.environ.get(cfgmod.ENV_USERNAME) or (entry.username if entry else None)
    username = username or _prompt("username")
    if args.password_stdin:
        if args.password:
            raise UsageError("give the password with -password or -password-stdin, not both")
        password = _stdin_password()
    else:
        password = (args.password or os.environ.get(cfgmod.ENV_PASSWORD)
                    or (entry.password if entry and entry.username == username else None)
                    or _prompt("password", True))
    device = args.device or cfgmod.device_name(cfg)
    from ..api import API, tls_context  # httpx: only for the commands that talk to a server

    tls = tls_context(entry.usercert, entry.userkey, entry.cacert) if entry else None
    with API(endpoint, tls=tls) as api:
        token = api.obtain_token(username, password, device)
    name = name or "default"
    cfgmod.save_login(cfg, name, endpoint, username, token, make_current=not cfg.current or bool(args.name),
                      device=device)
    print(f"Logged in to {cfgmod.normalize_endpoint(endpoint)} as {username}; the token for device {device} is "
          f"stored in {cfg.path} (datacenter {name}).")
    return 0


def _logout_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("-name", "--name", help="config entry (default: the current datacenter)")


def _revoke_on_server(dc: cfgmod.Datacenter) -> None:
    """Revoke the stored token on the server too, so a leftover copy of the config is useless."""
    from ..api import API, tls_context

    try:
        with API(dc.endpoint, token=dc.token, retries=1, tls=tls_context(dc.usercert, dc.userkey, dc.cacert)) as api:
            current = next((t for t in api.paginate("auth/tokens/") if t.get("current")), None)
            if current:
                api.delete(f"auth/tokens/{current['id']}/")
    except AuthError:
        pass  # already revoked or expired
    except PaddlectlError as e:
        print(f"warning: the token could not be revoked on the server ({e}); revoke it later with "
              "`paddlectl tokens revoke ID` or on the API tokens page", file=sys.stderr)


@command("logout", "Revoke the stored API token and forget it.", setup=_logout_setup)
def logout(ctx: Context, args: argparse.Namespace) -> int:
    cfg = ctx.config()
    dc = cfgmod.select(cfg, args.name or ctx.datacenter, env={})
    if dc.token:
        _revoke_on_server(dc)
    if cfgmod.save_logout(cfg, dc.name):
        print(f"Logged out of {dc.name}: the token was revoked and removed from {cfg.path}.")
    else:
        print(f"No token stored for {dc.name}.")
    return 0


def _tokens_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("list", "revoke"), default="list", help="list (the default) or revoke")
    p.add_argument("id", nargs="?", type=int, help="the token to revoke (an ID from the list)")


@command("tokens", "List your API tokens, or revoke one.", setup=_tokens_setup,
         usage="paddlectl tokens [list] | tokens revoke <ID>")
def tokens(ctx: Context, args: argparse.Namespace) -> int:
    if args.action == "revoke":
        if args.id is None:
            raise UsageError("which token? paddlectl tokens revoke <ID> (IDs are in `paddlectl tokens`)")
        ctx.client.revoke_token(args.id)
        print(f"token {args.id} revoked")
        return 0
    output.emit(ctx.client.tokens(), ctx.output,
                [("ID", lambda t: t["id"]), ("NAME", lambda t: t.get("name") or "(unnamed)"),
                 ("CREATED", lambda t: output.timestamp(t.get("created"))),
                 ("EXPIRES", lambda t: output.timestamp(t["expiry"]) if t.get("expiry") else "never"),
                 ("CURRENT", lambda t: "*" if t.get("current") else "")],
                name=lambda t: str(t["id"]))
    return 0


def _registry_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("add",), default="add", help="add (the default)")
    p.add_argument("-name", "--name", help="a name for the registry, used with submit -registry")
    p.add_argument("-server", "--server", help="registry server, e.g. registry.example.com")
    p.add_argument("-username", "--username", help="registry user name")
    p.add_argument("-password", "--password", help="registry password (asked when missing)")


@command("registry", "Add registry secret on paddlectl.", setup=_registry_setup,
         usage="paddlectl registry [add] -name NAME -server SERVER -username USER -password PASSWORD")
def registry(ctx: Context, args: argparse.Namespace) -> int:
    missing = [flag for flag in ("name", "server", "username") if not getattr(args, flag)]
    if missing:
        raise UsageError("missing " + ", ".join(f"-{m}" for m in missing))
    password = args.password or _prompt("password", True)
    created = ctx.client.add_registry(args.name, args.server, args.username, password)
    if ctx.output in ("table", "wide"):
        output.say(f"registry {created['name']} added ({created['server']})")
    else:
        output.emit(created, ctx.output)
    return 0


@command("version", "Print the client and server versions.")
def version(ctx: Context, args: argparse.Namespace) -> int:
    """Works without a configuration too: then only the client's version is known."""
    info: dict[str, str | None] = {"client": __version__, "server": None, "endpoint": None}
    try:
        client = ctx.client
    except ConfigError as e:
        client = None
        print(f"server: not configured ({str(e).splitlines()[0]})", file=sys.stderr)
    failure = None
    if client is not None:
        info["endpoint"] = client.api.endpoint
        try:
            info["server"] = client.version()["server"]
        except PaddlectlError as e:
            failure = e
    if ctx.output in ("json", "yaml"):
        output.emit(info, ctx.output)
    else:
        print(f"paddlectl client {info['client']}")
        if info["server"]:
            output.say(f"PaddleCloud server {info['server']} ({info['endpoint']})")
    if failure is not None:
        raise failure
    return 0


def _config_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("view", "use"), default="view",
                   help="view: show the settings in effect (secrets hidden); use NAME: set current-datacenter")
    p.add_argument("target", nargs="?", help="datacenter name for `use`")


@command("config", "Show the configuration, or switch the current datacenter.", setup=_config_setup,
         usage="paddlectl config [view] | config use <datacenter>")
def config(ctx: Context, args: argparse.Namespace) -> int:
    cfg = ctx.config()
    if args.action == "use":
        if not args.target:
            raise UsageError("which datacenter? paddlectl config use <name>")
        if cfg.find(args.target) is None:
            raise ConfigError(f"no datacenter named '{args.target}' in {cfg.path}; it has: "
                              f"{', '.join(cfg.names()) or 'none'}")
        cfgmod.set_current(cfg, args.target)
        print(f"current datacenter: {args.target}")
        return 0
    dc = cfgmod.select(cfg, ctx.datacenter)
    info = {"config": str(cfg.path), "exists": cfg.exists, "datacenter": dc.name, "endpoint": dc.endpoint,
            "username": dc.username, "auth": "token" if dc.token else "password" if dc.password else "none",
            "datacenters": cfg.names()}
    output.emit(info, ctx.output if ctx.output in ("json", "yaml") else "yaml")
    return 0
