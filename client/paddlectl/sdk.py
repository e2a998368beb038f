"""`Client`: the Python SDK over /api/v2. The CLI is a thin layer over it.

    client = Client.from_config()                      # or Client(endpoint, token=...)
    job = client.submit(PaddleJob(job_name="fit", trainer_package_path="./fit_a_line",
                                  entry_point="python train.py", pservers=2, trainers=2))
    for line in client.logs("fit", follow=True):
        print(line.replica, line.text)
    client.wait("fit", timeout=600)

Every method returns the server's JSON (dicts and lists) and raises a PaddlectlError subclass
(APIError with the server's message, NotFound, ConnectionFailed, ConfigError) on failure.
"""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from . import __version__
from . import config as cfgmod
from .api import API, JsonObject, tls_context
from .errors import APIError, ConfigError, NotFound, PaddlectlError
from .job import PaddleJob, check_job_name
from .logs import TERMINAL_STATES, LogLine, LogReader
from .pfs_paths import home_form

if TYPE_CHECKING:
    import httpx

ACTIVE_STATES = ("Queued", "Building", "Starting", "Running", "Suspended")
JobDict = dict[str, Any]


def _q(name: str) -> str:
    return quote(str(name), safe="")


class Client:
    def __init__(self, endpoint: str, *, token: str | None = None, username: str | None = None,
                 password: str | None = None, datacenter: str | None = None, timeout: float = 30.0,
                 token_cache: cfgmod.TokenCache | None = None, transport: httpx.BaseTransport | None = None,
                 usercert: str | None = None, userkey: str | None = None, cacert: str | None = None):
        """`datacenter` is the server's datacenter name (found out when not given); `usercert`
        and `userkey` a client certificate for TLS, `cacert` the CA to verify the server with."""
        self.api = API(endpoint, token=token, username=username, password=password, timeout=timeout,
                       token_cache=token_cache, transport=transport, tls=tls_context(usercert, userkey, cacert))
        self.username = username
        self._explicit_dc = datacenter
        self._dc_hint: str | None = None  # the config entry's own name, used if the server knows it
        self._datacenter: str | None = None
        self._dc_names: list[str] = []  # the server's datacenters, once asked
        self.config_name: str | None = None  # the config entry used, for messages
        self._storage: Any = None

    @classmethod
    def from_config(cls, datacenter: str | None = None, path: str | Path | None = None, **kwargs: Any) -> Client:
        """Configured like the CLI: ~/.paddle/config (or $PADDLE_CONFIG) and $PADDLECTL_* overrides."""
        cfg = cfgmod.load(path)
        dc = cfgmod.select(cfg, datacenter)
        cache = cfgmod.TokenCache(cfg.path.parent / "tokens")
        client = cls(dc.endpoint, token=dc.token, username=dc.username, password=dc.password,
                     datacenter=dc.server_name, token_cache=cache, usercert=dc.usercert, userkey=dc.userkey,
                     cacert=dc.cacert, **kwargs)
        client._dc_hint = dc.name
        client.config_name = dc.name
        return client

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- account ------------------------------------------------------------------------------
    def login(self, username: str, password: str, name: str | None = None) -> str:
        """Exchange credentials for an API token; later requests use it. A `name` (e.g. the
        device's) replaces the token you had under that name instead of adding one."""
        token = self.api.obtain_token(username, password, name)
        self.api._token, self.api._password, self.username = token, None, username
        self.api.username = username
        return token

    def version(self) -> dict[str, str]:
        server = self.api.request("GET", "version/", auth=False) or {}
        return {"client": __version__, "server": str(server.get("version", "unknown"))}

    def datacenters(self) -> list[dict[str, Any]]:
        return list(self.api.paginate("datacenters/"))

    @property
    def datacenter(self) -> str:
        """The server's name of the datacenter this client works in: the one given, else the
        config entry's name when the server has it, else the server's only datacenter."""
        if self._datacenter is None:
            names = self._dc_names = [d["name"] for d in self.datacenters()]
            if self._explicit_dc:
                if self._explicit_dc not in names:
                    raise ConfigError(f"the server has no datacenter named '{self._explicit_dc}' (it has: "
                                      f"{', '.join(names) or 'none'})")
                self._datacenter = self._explicit_dc
            elif self._dc_hint in names:
                self._datacenter = self._dc_hint
            elif len(names) == 1:
                self._datacenter = names[0]
            else:
                raise ConfigError(f"the server has several datacenters ({', '.join(names)}) and none is named "
                                  f"'{self._dc_hint}': add `datacenter: <name>` to your config entry")
        return self._datacenter

    def home(self) -> str:
        """Your PFS home: /pfs/<datacenter>/home/<username>."""
        if not self.username:
            raise ConfigError("the configuration has no username, which storage paths need")
        return f"/pfs/{self.datacenter}/home/{self.username}"

    def pfs_path(self, path: str) -> str:
        """A PFS path as the server names it. A config entry stands for its server's datacenter,
        so `/pfs/<entry name>/...` (seed 003 writes `/pfs/datacenter1/home/...` with its entry
        named datacenter1) is that datacenter's, unless the server has one of that name; and
        seed 004's `/pfs/<dc>/user/<you>` is your home."""
        path = home_form(path)
        parts = path.split("/", 3)
        if len(parts) >= 3 and parts[1] == "pfs" and self._dc_hint and parts[2] == self._dc_hint \
                and self.datacenter != self._dc_hint and self._dc_hint not in self._dc_names:
            parts[2] = self.datacenter
        return "/".join(parts)

    def quota(self, datacenter: str | None = None) -> dict[str, Any]:
        return cast(JsonObject, self.api.get("quota/", datacenter=datacenter or self.datacenter))

    def cluster(self) -> list[dict[str, Any]]:
        """Every datacenter: capacity and use, its running jobs and its queue in order (another
        user's job: owner and resources only)."""
        result: list[dict[str, Any]] = self.api.get("cluster/")
        return result

    def registries(self) -> list[dict[str, Any]]:
        return list(self.api.paginate("registries/"))

    def add_registry(self, name: str, server: str, username: str, password: str) -> dict[str, Any]:
        return cast(JsonObject, self.api.post("registries/", {"name": name, "server": server, "username": username,
                                             "password": password}))

    def delete_registry(self, name: str) -> None:
        self.api.delete(f"registries/{_q(name)}/")

    def tokens(self) -> list[dict[str, Any]]:
        """Your API tokens (id, name, created, expiry, current), never their secrets."""
        return list(self.api.paginate("auth/tokens/"))

    def revoke_token(self, token_id: int) -> None:
        self.api.delete(f"auth/tokens/{int(token_id)}/")

    def webhooks(self) -> list[dict[str, Any]]:
        """Your webhooks (id, url, events, active, created), never their secrets."""
        return list(self.api.paginate("webhooks/"))

    def add_webhook(self, url: str, events: Iterable[str], secret: str = "") -> dict[str, Any]:
        """A new webhook, with its secret: the only time the server shows it."""
        return cast(JsonObject, self.api.post("webhooks/", {"url": url, "events": list(events), "secret": secret}))

    def delete_webhook(self, webhook_id: int) -> None:
        self.api.delete(f"webhooks/{int(webhook_id)}/")

    def webhook_deliveries(self, webhook_id: int) -> list[dict[str, Any]]:
        return list(self.api.paginate(f"webhooks/{int(webhook_id)}/deliveries/"))

    # --- jobs ---------------------------------------------------------------------------------
    def list(self, all: bool = True, state: str | Iterable[str] | None = None) -> list[JobDict]:  # noqa: A002
        """Your jobs, newest first; `all=False` keeps the ones that have not ended."""
        params: dict[str, Any] = {}
        if not all:
            params["active"] = "true"
        if state:
            params["state"] = [state] if isinstance(state, str) else list(state)
        return list(self.api.paginate("jobs/", **params))

    def get(self, name: str) -> JobDict:
        """One job with its replicas and events."""
        return cast(JsonObject, self.api.get(f"jobs/{_q(name)}/"))

    def workers(self, name: str) -> builtins.list[dict[str, Any]]:  # `list` is a method here
        return list(self.get(name).get("replicas", []))

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
            return True
        except NotFound:
            return False

    def submit(self, job: PaddleJob | None = None, *, package: str | Path | None = None,
               progress: Callable[[int, int], None] | None = None, nest_as: str | None = None,
               **fields: Any) -> JobDict:
        """Submit `job` (a PaddleJob, or its fields as keyword arguments). The package is a /pfs
        path already in storage, or a local directory: it is uploaded first to
        /pfs/<dc>/home/<you>/jobs/<name>/ (`progress(done_bytes, total_bytes)` is called as it goes),
        or with `nest_as="demo"` to .../jobs/<name>/demo/, so that `python -m demo.train` run in
        the package finds it as on your machine."""
        if job is None:
            job = PaddleJob(**fields)
        elif fields:
            raise TypeError("pass either a PaddleJob or its fields, not both")
        source = package if package is not None else job.package
        if not source:
            raise ValueError("a package is required: a local directory or a /pfs/... path")
        source = str(source)
        if source.startswith("/pfs/"):
            return cast(JsonObject, self.api.post("jobs/", job.to_request(self.pfs_path(source).rstrip("/"))))
        local = Path(source).expanduser()
        if not local.is_dir():
            raise PaddlectlError(f"{source}: not a directory (give a local package directory or a /pfs/... path)")
        check_job_name(job.job_name)
        if self.exists(job.job_name):
            raise APIError(400, {"name": [f"you already have a job named '{job.job_name}'; pick another name or "
                                          "delete that job"]})
        if job.datacenter is None:
            job.datacenter = self.datacenter
        dest = f"/pfs/{job.datacenter}/home/{self.username}/jobs/{job.job_name}"
        if nest_as:
            if self.storage.exists(dest):  # left by an older job of that name: start clean
                self.storage.rm(dest, recursive=True)
            self.storage.mkdir(dest)
        self.storage.upload_package(local, f"{dest}/{nest_as}" if nest_as else dest, progress=progress)
        try:
            return cast(JsonObject, self.api.post("jobs/", job.to_request(dest)))
        except APIError:
            # Refused (a bad field, the quota): leave nothing behind.
            with contextlib.suppress(PaddlectlError):
                self.storage.rm(dest, recursive=True)
            raise

    def clone(self, name: str, /, **changes: Any) -> JobDict:
        """Submit job `name` again with `changes` to its fields (the API's names: trainers, cpu,
        env, ..., name); the new job gets a free name (<name>-2) unless one is given, and
        records `cloned_from`."""
        return cast(JsonObject, self.api.post(f"jobs/{_q(name)}/clone/", changes))

    def suspend(self, name: str) -> JobDict:
        """Stop the job and free its resources, keeping it (Suspended): its replicas get SIGTERM
        first, time to checkpoint. A queued job leaves the queue."""
        return cast(JsonObject, self.api.post(f"jobs/{_q(name)}/suspend/"))

    def resume(self, name: str) -> JobDict:
        """Queue a suspended job again; it continues from its checkpoint where it keeps one."""
        return cast(JsonObject, self.api.post(f"jobs/{_q(name)}/resume/"))

    def kill(self, name: str) -> JobDict:
        """Stop every replica; the job becomes Killed (its history and logs stay)."""
        return cast(JsonObject, self.api.post(f"jobs/{_q(name)}/kill/"))

    def delete(self, name: str) -> None:
        """Kill the job if it runs and remove it with its history and logs."""
        self.api.delete(f"jobs/{_q(name)}/")

    def wait(self, name: str, states: str | Iterable[str] = TERMINAL_STATES, timeout: float | None = None,
             interval: float = 1.0) -> JobDict:
        """Until the job is in one of `states` (default: ended); TimeoutError after `timeout` s.
        Reads the job when its websocket pushes a change, or every `interval` s without one."""
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = None if timeout is None else time.monotonic() + timeout
        from .live import JobEvents  # websockets: only for a wait

        with JobEvents(self.api, name) as events:
            while True:
                job = self.get(name)
                if job["state"] in wanted:
                    return job
                if job["state"] in TERMINAL_STATES and not wanted & set(TERMINAL_STATES):
                    raise PaddlectlError(f"job {name} ended ({job['state']}: "
                                         f"{job.get('message') or job.get('reason')}) "
                                         f"before reaching {', '.join(sorted(wanted))}")
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"job {name} is still {job['state']} after {timeout:g}s")
                events.pause(interval, None if deadline is None else deadline - time.monotonic())

    def logs(self, name: str, replica: str | None = None, lines: int | None = None, follow: bool = False,
             poll_interval: float = 1.0, reconnect_for: float = 300.0,
             on_job: Callable[[JobDict], None] | None = None) -> Iterator[LogLine]:
        """The job's log lines (all replicas, or one: "trainer-0"). `lines=N` starts with the last
        N lines of each replica, else from the beginning. With `follow=True` it keeps going until
        the job has ended, waits while replicas are pending, and rides out dropped connections
        for up to `reconnect_for` seconds without losing or repeating a line."""
        return iter(LogReader(self.api, name, replica=replica, lines=lines, follow=follow,
                              poll_interval=poll_interval, reconnect_for=reconnect_for, on_job=on_job))

    # --- storage ------------------------------------------------------------------------------
    @property
    def storage(self) -> Any:
        """PFS operations (ls, mkdir, rm, mv, upload, download): see paddlectl.pfs.Storage."""
        if self._storage is None:
            from .pfs import Storage

            self._storage = Storage(self)
        return self._storage
