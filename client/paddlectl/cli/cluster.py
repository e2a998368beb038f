"""`paddlectl get cluster`: every datacenter's capacity and use, its running jobs and its queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import output

CLUSTER_COLUMNS: list[output.Column] = [
    ("QUEUE", lambda j: j.get("queue_position")),
    ("STATE", lambda j: j["state"]),
    ("OWNER", lambda j: j["owner"]),
    ("NAME", lambda j: j.get("name")),  # another user's job: not shown
    ("CPU", lambda j: output.cores(j["resources"]["cpu_millicores"])),
    ("MEMORY", lambda j: output.human_bytes(j["resources"]["memory_bytes"])),
    ("GPU", lambda j: j["resources"]["gpus"]),
    ("AGE", lambda j: output.age(j.get("since"))),
    ("REASON", lambda j: j.get("reason") if j.get("reason") != j.get("state") else None),
]


def print_cluster(datacenters: list[dict[str, Any]], fmt: str) -> None:
    """Per datacenter a line of capacity and use, then its running jobs and its queue in order."""
    if fmt in ("json", "yaml", "name"):
        output.emit(datacenters, "json" if fmt == "name" else fmt)
        return
    for dc in datacenters:
        cap, used = dc["capacity"], dc["used"]
        limit: dict[str, Callable[[int], str]] = {"cpu_millicores": output.cores, "memory_bytes": output.human_bytes,
                                                  "gpus": str}
        held = ", ".join(f"{label} {limit[key](used[key])} of "
                         f"{'no limit' if cap[key] is None else limit[key](cap[key])}"
                         for label, key in (("CPU", "cpu_millicores"), ("memory", "memory_bytes"), ("GPU", "gpus")))
        output.say(f"datacenter {dc['name']} ({dc['backend']}): {held} held; "
                   f"{len(dc['running'])} running, {len(dc['queue'])} queued")
        if dc["running"] or dc["queue"]:
            output.emit([*dc["running"], *dc["queue"]], fmt, CLUSTER_COLUMNS,
                        [("MESSAGE", lambda j: j.get("message"))])
