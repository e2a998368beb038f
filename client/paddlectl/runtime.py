"""Who am I in this job? Read inside a training program, from the process contract.

PaddleCloud gives every replica its place in the job through environment variables (the
current names from Paddle's fleet, and the older names that existing programs read) and the
files `trainer_id` / `trainer_count` in the working directory. These helpers accept all of
them, newest first, so one program runs unchanged on any PaddleCloud and locally (where
nothing is set: trainer 0 of 1). Standard library only.

    from paddlectl import runtime
    if runtime.is_trainer():
        shard = files[runtime.trainer_id()::runtime.trainer_count()]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

TRAINER_ID_VARS = ("PADDLE_TRAINER_ID", "TRAINER_ID", "PADDLE_INIT_TRAINER_ID")
TRAINER_COUNT_VARS = ("PADDLE_TRAINERS_NUM", "TRAINERS", "PADDLE_INIT_NUM_GRADIENT_SERVERS")
# Seed 004 reads /trainer_id; PaddleCloud writes the files where the replica starts.
FILE_DIRS = (".", "/")


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def _int_from(names: tuple[str, ...], env: Mapping[str, str]) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"${name} should be a whole number, got {value!r}") from None
    return None


def _int_file(name: str, dirs: tuple[str, ...] = FILE_DIRS) -> int | None:
    for directory in dirs:
        path = Path(directory) / name
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{path} should hold a whole number, got {text!r}") from None
    return None


def trainer_id(default: int = 0, env: Mapping[str, str] | None = None) -> int:
    """This trainer's index, 0..trainer_count()-1 (`default` when nothing says)."""
    value = _int_from(TRAINER_ID_VARS, _env(env))
    if value is None:
        value = _int_file("trainer_id")
    return default if value is None else value


def trainer_count(default: int = 1, env: Mapping[str, str] | None = None) -> int:
    """How many trainers the job has (`default` when nothing says)."""
    value = _int_from(TRAINER_COUNT_VARS, _env(env))
    if value is None:
        value = _int_file("trainer_count")
    return default if value is None else value


def role(env: Mapping[str, str] | None = None) -> str:
    """'pserver' or 'trainer' (collective jobs and local runs have trainers only)."""
    value = _env(env).get("TRAINING_ROLE", "").strip().upper()
    return "pserver" if value == "PSERVER" else "trainer"


def is_pserver(env: Mapping[str, str] | None = None) -> bool:
    return role(env) == "pserver"


def is_trainer(env: Mapping[str, str] | None = None) -> bool:
    return role(env) == "trainer"


def is_chief(env: Mapping[str, str] | None = None) -> bool:
    """Trainer 0: the one that should save the model or write summaries."""
    return is_trainer(env) and trainer_id(env=env) == 0


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def pserver_endpoints(env: Mapping[str, str] | None = None) -> list[str]:
    """The parameter servers as "host:port", in index order ([] in collective mode)."""
    env = _env(env)
    if env.get("PADDLE_PSERVERS_IP_PORT_LIST", "").strip():
        return _split(env["PADDLE_PSERVERS_IP_PORT_LIST"])
    hosts = _split(env.get("PADDLE_INIT_PSERVERS", ""))  # legacy: hosts only, one shared port
    port = env.get("PADDLE_INIT_PORT", "").strip()
    return [f"{h}:{port}" if port and ":" not in h else h for h in hosts]


def trainer_endpoints(env: Mapping[str, str] | None = None) -> list[str]:
    return _split(_env(env).get("PADDLE_TRAINER_ENDPOINTS", ""))


def current_endpoint(env: Mapping[str, str] | None = None) -> str | None:
    """This replica's own "host:port"."""
    env = _env(env)
    if env.get("PADDLE_CURRENT_ENDPOINT"):
        return env["PADDLE_CURRENT_ENDPOINT"]
    if env.get("POD_IP") and env.get("PADDLE_PORT"):
        return f"{env['POD_IP']}:{env['PADDLE_PORT']}"
    return None


def pserver_count(env: Mapping[str, str] | None = None) -> int:
    env = _env(env)
    found = pserver_endpoints(env)
    if found:
        return len(found)
    value = env.get("PSERVERS", "").strip()
    return int(value) if value.isdigit() else 0


def num_passes(default: int = 1, env: Mapping[str, str] | None = None) -> int:
    value = _int_from(("PADDLE_INIT_NUM_PASSES",), _env(env))
    return default if value is None else value


def use_gpu(env: Mapping[str, str] | None = None) -> bool:
    return _env(env).get("PADDLE_INIT_USE_GPU", "0").strip().lower() in ("1", "true", "yes")


def job_name(env: Mapping[str, str] | None = None) -> str | None:
    return _env(env).get("PADDLE_JOB_NAME") or None


def datacenter(env: Mapping[str, str] | None = None) -> str | None:
    return _env(env).get("PADDLE_CLOUD_CURRENT_DATACENTER") or None


def username(env: Mapping[str, str] | None = None) -> str | None:
    return _env(env).get("PADDLE_CLOUD_USERNAME") or None


def pfs_home(env: Mapping[str, str] | None = None) -> str | None:
    """The user's storage home as this process sees it: $PADDLE_PFS_HOME (local backend), else
    /pfs/<datacenter>/home/<user> (Kubernetes mount); None outside a job."""
    env = _env(env)
    if env.get("PADDLE_PFS_HOME"):
        return env["PADDLE_PFS_HOME"]
    dc, user = datacenter(env), username(env)
    return f"/pfs/{dc}/home/{user}" if dc and user else None


def pfs_path(path: str, env: Mapping[str, str] | None = None) -> str:
    """Map a path as users write it (/pfs/<dc>/home/<user>/data) to where this process finds it:
    locally the home is elsewhere on disk ($PADDLE_PFS_HOME); other paths are returned as is."""
    env = _env(env)
    home_var = env.get("PADDLE_PFS_HOME")
    dc, user = datacenter(env), username(env)
    if home_var and dc and user:
        prefix = f"/pfs/{dc}/home/{user}"
        if path == prefix or path.startswith(prefix + "/"):
            return home_var.rstrip("/") + path[len(prefix):]
    return path


def input_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The job's PFS input directory (`--input` of `paddle job submit` / `paddle k8s job`,
    passed as $PADDLE_INPUT_DIR) where this process finds it; None when none was given."""
    value = _env(env).get("PADDLE_INPUT_DIR")
    return pfs_path(value, env) if value else None


def output_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The job's PFS output directory ($PADDLE_OUTPUT_DIR, from `--output`), as input_dir()."""
    value = _env(env).get("PADDLE_OUTPUT_DIR")
    return pfs_path(value, env) if value else None


@dataclass(frozen=True)
class Cluster:
    """A snapshot of everything above."""

    role: str
    trainer_id: int
    trainer_count: int
    pservers: list[str] = field(default_factory=list)
    trainers: list[str] = field(default_factory=list)
    current_endpoint: str | None = None
    job_name: str | None = None
    datacenter: str | None = None
    username: str | None = None
    pfs_home: str | None = None
    num_passes: int = 1
    use_gpu: bool = False


def cluster(env: Mapping[str, str] | None = None) -> Cluster:
    return Cluster(role=role(env), trainer_id=trainer_id(env=env), trainer_count=trainer_count(env=env),
                   pservers=pserver_endpoints(env), trainers=trainer_endpoints(env),
                   current_endpoint=current_endpoint(env), job_name=job_name(env), datacenter=datacenter(env),
                   username=username(env), pfs_home=pfs_home(env), num_passes=num_passes(env=env),
                   use_gpu=use_gpu(env))
