"""`paddlectl webhooks`: the URLs told when your jobs start or end."""

from __future__ import annotations

import argparse

from . import output
from .base import Context, UsageError, command

EVENTS = ("job.started", "job.succeeded", "job.failed", "job.killed")
DEFAULT_EVENTS = "job.succeeded,job.failed,job.killed"


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("list", "add", "delete", "deliveries"), default="list",
                   help="list (the default), add, delete, or deliveries (a webhook's delivery log)")
    p.add_argument("target", nargs="?", help="add: the URL; delete and deliveries: the webhook's ID")
    p.add_argument("-events", "--events", default=DEFAULT_EVENTS,
                   help=f"add: comma-separated events to send, of {', '.join(EVENTS)} (default: {DEFAULT_EVENTS})")
    p.add_argument("-secret", "--secret", default="",
                   help="add: the signing secret (at least 16 characters; default: the server makes one)")


def _id(args: argparse.Namespace) -> int:
    if not args.target or not args.target.isdigit():
        raise UsageError(f"which webhook? paddlectl webhooks {args.action} <ID> (IDs are in `paddlectl webhooks`)")
    return int(args.target)


@command("webhooks", "List, add or delete your webhooks, or show one's deliveries.", setup=_setup,
         usage="paddlectl webhooks [list] | add <URL> [-events E,E] [-secret S] | delete <ID> | deliveries <ID>")
def webhooks(ctx: Context, args: argparse.Namespace) -> int:
    if args.action == "add":
        if not args.target:
            raise UsageError("which URL? paddlectl webhooks add <URL> [-events job.failed,...]")
        created = ctx.client.add_webhook(args.target, [e.strip() for e in args.events.split(",") if e.strip()],
                                         args.secret)
        if ctx.output in ("table", "wide"):
            output.say(f"webhook {created['id']} added for {', '.join(created['events'])}; its secret (shown only "
                       f"now, keep it to check signatures): {created['secret']}")
        else:
            output.emit(created, ctx.output, name=lambda h: str(h["id"]))
        return 0
    if args.action == "delete":
        ctx.client.delete_webhook(_id(args))
        print(f"webhook {args.target} deleted")
        return 0
    if args.action == "deliveries":
        output.emit(ctx.client.webhook_deliveries(_id(args)), ctx.output,
                    [("ID", lambda d: d["id"]), ("EVENT", lambda d: d["event"]), ("STATUS", lambda d: d["status"]),
                     ("ATTEMPTS", lambda d: d["attempts"]), ("HTTP", lambda d: d.get("status_code")),
                     ("TIME", lambda d: output.timestamp(d.get("last_attempt") or d.get("created"))),
                     ("ERROR", lambda d: d.get("error"))],
                    name=lambda d: str(d["id"]))
        return 0
    output.emit(ctx.client.webhooks(), ctx.output,
                [("ID", lambda h: h["id"]), ("URL", lambda h: h["url"]), ("EVENTS", lambda h: ",".join(h["events"])),
                 ("ACTIVE", lambda h: "yes" if h["active"] else "no"),
                 ("CREATED", lambda h: output.timestamp(h.get("created")))],
                name=lambda h: str(h["id"]))
    return 0
