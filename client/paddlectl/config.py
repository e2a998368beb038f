"""Client configuration: ~/.paddle/config (seed 004's format) plus environment overrides.

```yaml
datacenters:
- name: datacenter1
  username: alice
  password: secret            # or, after `paddlectl login`: token: <API token>
  endpoint: http://cloud.paddlepaddle.org
current-datacenter: datacenter1
device: my-laptop             # written by `paddlectl login`: this machine's token name on servers
```

Which entry is used: `--datacenter NAME`, else $PADDLECTL_DATACENTER, else `current-datacenter`,
else the only entry. Environment overrides for that entry: $PADDLECTL_ENDPOINT,
$PADDLECTL_USERNAME, $PADDLECTL_PASSWORD, $PADDLECTL_TOKEN. With $PADDLECTL_ENDPOINT set no
file is needed at all (CI). $PADDLE_CONFIG names another file.
An entry may also say `datacenter: <name>` when the server calls the datacenter differently
from the entry's own name, and `usercert`/`userkey` (a client certificate for TLS, seed 003) and
`cacert` (the CA that signed the server's certificate, when it is not a public one).

Two older forms are read too. Seed 003's map of datacenters:

```yaml
datacenter1:
  username: user
  usercert: /path/to/user.pem
  userkey:  /path/to/user-key.pem
  endpoint: dc1.paddlepaddle.org
```

and seed 001's single-server file, whose `dockerRegistry` holds the credentials of the registry
that `paddle job submit --base-image` pulls from:

```yaml
apiVersion: v1
dockerRegistry:
  domain: domain.com          # default docker.io
  username: <username>
  password: <password>
paddleServer: http://<paddle server domain>:<paddle server port>
username: alice               # PaddleCloud additions: who you are on the server
password: secret              #   (`paddle login` replaces this with token: ...)
```
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

# yaml is imported where a file is read or written: a command configured by the environment alone
# (CI, bench/cli_start.py) never loads it.

ENV_CONFIG = "PADDLE_CONFIG"
ENV_DATACENTER = "PADDLECTL_DATACENTER"
ENV_ENDPOINT = "PADDLECTL_ENDPOINT"
ENV_TOKEN = "PADDLECTL_TOKEN"
ENV_USERNAME = "PADDLECTL_USERNAME"
ENV_PASSWORD = "PADDLECTL_PASSWORD"

EXAMPLE = """datacenters:
- name: datacenter1
  username: <your user name>
  password: <secret>
  endpoint: http://cloud.paddlepaddle.org
current-datacenter: datacenter1
"""


def default_path() -> Path:
    explicit = os.environ.get(ENV_CONFIG)
    return Path(explicit).expanduser() if explicit else Path.home() / ".paddle" / "config"


def normalize_endpoint(endpoint: str) -> str:
    endpoint = endpoint.strip().rstrip("/")
    if "://" not in endpoint:
        endpoint = "https://" + endpoint
    if endpoint.endswith("/api/v2"):
        endpoint = endpoint[: -len("/api/v2")]
    return endpoint


@dataclass
class Datacenter:
    """One entry of the config: where the server is and who you are there."""

    name: str
    endpoint: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    server_name: str | None = None  # the server's name for this datacenter, when it differs
    usercert: str | None = None  # client certificate (PEM) presented in the TLS handshake
    userkey: str | None = field(default=None, repr=False)  # its private key (PEM)
    cacert: str | None = None  # CA bundle to verify the server with, instead of the system's

    @property
    def api_url(self) -> str:
        return normalize_endpoint(self.endpoint) + "/api/v2/"


@dataclass
class DockerRegistry:
    """Seed 001's `dockerRegistry`: where `--base-image` is pulled from, with which credentials."""

    domain: str
    username: str | None
    password: str | None = field(default=None, repr=False)


@dataclass
class Config:
    path: Path
    exists: bool
    data: dict[str, Any]
    datacenters: list[Datacenter]
    current: str | None
    docker_registry: DockerRegistry | None = None

    @property
    def seed001(self) -> bool:
        """The file is in seed 001's single-server form (`paddleServer: ...`)."""
        return SEED001_SERVER in self.data

    def find(self, name: str) -> Datacenter | None:
        return next((dc for dc in self.datacenters if dc.name == name), None)

    def names(self) -> list[str]:
        return [dc.name for dc in self.datacenters]


def _entry(raw: Any, where: str, path: Path) -> Datacenter:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {where} must be a mapping with name, username, password and endpoint")
    name = raw.get("name")
    if not name or not isinstance(name, (str, int)):
        raise ConfigError(f"{path}: {where} has no name")
    endpoint = raw.get("endpoint")
    if not endpoint or not isinstance(endpoint, str):
        raise ConfigError(f"{path}: datacenter '{name}' has no endpoint (e.g. endpoint: http://cloud.example.com)")

    def text(key: str) -> str | None:
        value = raw.get(key)
        return None if value is None or value == "" else str(value)

    def file(key: str) -> str | None:
        value = text(key)
        return None if value is None else str((path.parent / Path(value).expanduser()).resolve())

    if bool(raw.get("usercert")) != bool(raw.get("userkey")):
        raise ConfigError(f"{path}: datacenter '{name}' needs both usercert and userkey for a client certificate")
    if raw.get("usercert") and endpoint.strip().lower().startswith("http://"):
        # Certificates are only presented over TLS: rather say so than talk plain HTTP without them.
        raise ConfigError(f"{path}: datacenter '{name}' has a client certificate (usercert) but a plain http:// "
                          "endpoint; use https://")
    return Datacenter(name=str(name), endpoint=endpoint, username=text("username"), password=text("password"),
                      token=text("token"), server_name=text("datacenter"), usercert=file("usercert"),
                      userkey=file("userkey"), cacert=file("cacert"))


SEED001_SERVER = "paddleServer"
SEED001_NAME = "default"  # the entry name of a seed-001 file, which has only one server


def _seed001(data: dict[str, Any], path: Path) -> tuple[list[Datacenter], DockerRegistry | None]:
    server = data.get(SEED001_SERVER)
    if not server or not isinstance(server, str):
        raise ConfigError(f"{path}: paddleServer must be the server's URL, e.g. paddleServer: http://cloud.example.com")
    entry = {k: v for k, v in data.items() if k in ("username", "password", "token", "datacenter", "usercert",
                                                       "userkey", "cacert")}
    dc = _entry({"name": SEED001_NAME, "endpoint": server, **entry}, "paddleServer", path)
    raw = data.get("dockerRegistry")
    if raw is None:
        return [dc], None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: dockerRegistry must be a mapping with domain, username and password")
    # The seed's own example writes `domain: domain.com //default is docker.io`.
    domain = str(raw.get("domain") or "docker.io").split("//")[0].strip() or "docker.io"
    user, password = raw.get("username"), raw.get("password")
    return [dc], DockerRegistry(domain, None if user is None else str(user),
                                None if password is None else str(password))


def load(path: str | Path | None = None) -> Config:
    """Read and check the config file. A missing file gives an empty Config (exists=False)."""
    path = Path(path).expanduser() if path else default_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config(path, False, {}, [], None)
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must be a YAML mapping like:\n{EXAMPLE}")
    registry = None
    if SEED001_SERVER in data:
        entries, registry = _seed001(data, path)
    elif "datacenters" in data:
        raw = data["datacenters"] or []
        if not isinstance(raw, list):
            raise ConfigError(f"{path}: 'datacenters' must be a list of entries, e.g.:\n{EXAMPLE}")
        entries = [_entry(item, f"datacenters[{i}]", path) for i, item in enumerate(raw)]
    else:
        # Seed 003's older form: a mapping from datacenter name to {endpoint, username, ...}.
        entries = [_entry({"name": k, **v}, f"datacenter '{k}'", path) for k, v in data.items()
                   if isinstance(v, dict)]
        if not entries and data:
            raise ConfigError(f"{path} has no 'datacenters' list; it should look like:\n{EXAMPLE}")
    seen: set[str] = set()
    for dc in entries:
        if dc.name in seen:
            raise ConfigError(f"{path}: datacenter '{dc.name}' is listed twice")
        seen.add(dc.name)
    current = data.get("current-datacenter")
    return Config(path, True, data, entries, None if current is None else str(current), registry)


def warn_if_readable(cfg: Config) -> None:
    """Like ssh: secrets in a file others can read deserve a warning (POSIX only)."""
    if not cfg.exists or os.name != "posix":
        return
    if not any(dc.password or dc.token for dc in cfg.datacenters):
        return
    try:
        mode = cfg.path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(f"warning: {cfg.path} holds secrets and is readable by others; run: chmod 600 {cfg.path}",
              file=sys.stderr)


def select(cfg: Config, name: str | None = None, env: dict[str, str] | None = None) -> Datacenter:
    """The datacenter entry to use, with the environment's overrides applied."""
    env = dict(os.environ) if env is None else env
    wanted = name or env.get(ENV_DATACENTER) or None
    endpoint = env.get(ENV_ENDPOINT)
    dc = _configured(cfg, wanted, endpoint)
    if dc is None:
        if not endpoint:
            raise ConfigError(_missing(cfg))
        dc = Datacenter(name=wanted or "default", endpoint=endpoint)
    dc = Datacenter(**vars(dc))
    if endpoint:
        dc.endpoint = endpoint
    for var, attr in ((ENV_USERNAME, "username"), (ENV_PASSWORD, "password"), (ENV_TOKEN, "token")):
        if env.get(var):
            setattr(dc, attr, env[var])
    return dc


def _configured(cfg: Config, wanted: str | None, endpoint: str | None) -> Datacenter | None:
    """The config's entry for `wanted` (else the current one, else the only one); None where
    there is none and the environment's `endpoint` stands in. Raises when none can be chosen."""
    dc: Datacenter | None = None
    if wanted:
        dc = cfg.find(wanted)
        if dc is None and not endpoint:
            if not cfg.exists:
                raise ConfigError(_missing(cfg))
            raise ConfigError(f"no datacenter named '{wanted}' in {cfg.path}; "
                              f"it has: {', '.join(cfg.names()) or 'none'}")
    elif cfg.current:
        dc = cfg.find(cfg.current)
        if dc is None and not endpoint:
            raise ConfigError(f"{cfg.path}: current-datacenter '{cfg.current}' is not in the datacenters list "
                              f"({', '.join(cfg.names()) or 'empty'})")
    elif len(cfg.datacenters) == 1:
        dc = cfg.datacenters[0]
    elif cfg.datacenters and not endpoint:
        raise ConfigError(f"{cfg.path} lists several datacenters ({', '.join(cfg.names())}): set current-datacenter "
                          "or pass --datacenter NAME")
    return dc


def _missing(cfg: Config) -> str:
    if not cfg.exists:
        return (f"no client configuration: {cfg.path} does not exist.\n"
                f"Run `paddlectl login -endpoint URL -username NAME`, or create it with:\n{EXAMPLE}")
    return f"{cfg.path} lists no datacenters; it should look like:\n{EXAMPLE}"


def device_name(cfg: Config) -> str:
    """This machine's name for its API tokens: the config's `device`, else the host name.
    Logging in again under the same name replaces the server's token for it."""
    name = cfg.data.get("device")
    return str(name).strip() if name and str(name).strip() else socket.gethostname() or "paddlectl"


def _dump(data: Any, **options: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data, **options))


def _write_private(path: Path, text: str) -> None:
    """Write atomically with mode 0600 (the file holds a password or token)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_login(cfg: Config, name: str, endpoint: str, username: str, token: str, *, make_current: bool,
               device: str | None = None) -> None:
    """Store `token` for datacenter `name` in place of its password, and the `device` name it
    was issued to (file mode 0600)."""
    if cfg.seed001 and name == SEED001_NAME:
        # Keep the seed-001 form (other tools read it): the token goes beside paddleServer.
        data = {k: v for k, v in cfg.data.items() if k != "password"}
        data.update({"username": username, SEED001_SERVER: endpoint, "token": token,
                     **({"device": device} if device else {})})
        _write_private(cfg.path, _dump(data, sort_keys=False, default_flow_style=False))
        return
    data = dict(cfg.data) if cfg.exists and "datacenters" in cfg.data else {
        "datacenters": [{"name": dc.name, "username": dc.username, "endpoint": dc.endpoint,
                         **({"password": dc.password} if dc.password else {}),
                         **({"token": dc.token} if dc.token else {}),
                         **{k: getattr(dc, k) for k in ("usercert", "userkey", "cacert") if getattr(dc, k)}}
                        for dc in cfg.datacenters],
        **({"current-datacenter": cfg.current} if cfg.current else {}),
    }
    entries = [dict(e) for e in (data.get("datacenters") or [])]
    for entry in entries:
        if str(entry.get("name")) == name:
            break
    else:
        entry = {"name": name}
        entries.append(entry)
    entry.pop("password", None)
    entry.update({"username": username, "endpoint": endpoint, "token": token})
    data["datacenters"] = entries
    if make_current or not data.get("current-datacenter"):
        data["current-datacenter"] = name
    if device:
        data["device"] = device
    _write_private(cfg.path, _dump(data, sort_keys=False, default_flow_style=False))


def set_current(cfg: Config, name: str) -> None:
    data = dict(cfg.data)
    data["current-datacenter"] = name
    _write_private(cfg.path, _dump(data, sort_keys=False, default_flow_style=False))


def save_logout(cfg: Config, name: str) -> bool:
    """Forget the token of datacenter `name`; True if there was one."""
    if cfg.seed001:
        if name != SEED001_NAME or "token" not in cfg.data:
            return False
        _write_private(cfg.path, _dump({k: v for k, v in cfg.data.items() if k != "token"},
                                                sort_keys=False))
        return True
    entries = [dict(e) for e in (cfg.data.get("datacenters") or [])]
    found = False
    for entry in entries:
        if str(entry.get("name")) == name and "token" in entry:
            entry.pop("token")
            found = True
    if found:
        _write_private(cfg.path, _dump({**cfg.data, "datacenters": entries}, sort_keys=False))
    return found


class TokenCache:
    """Tokens obtained for configs that hold a password, so each command does not mint a new
    one on the server. Kept beside the config, mode 0600; best effort."""

    def __init__(self, path: Path):
        self.path = path

    def _read(self) -> dict[str, str]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError:
            return {}
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, key: str) -> str | None:
        return self._read().get(key)

    def put(self, key: str, token: str | None) -> None:
        data = self._read()
        if token is None:
            data.pop(key, None)
        else:
            data[key] = token
        with contextlib.suppress(OSError):
            _write_private(self.path, _dump(data))
