"""Recorded request/response pairs of the compiled paddlectl client (protocol-v1.md), as data:
what it sends (method, path, body) and what it needs back (status line and JSON shape). In a
shape, a type matches any value of that type, `NULLABLE(t)` also None, `NONEMPTY` a non-empty
string, a one-element list every element of a list (`AT_LEAST_ONE(x)`: and there is one), and a
dict the keys it names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NULLABLE:
    type: Any


@dataclass(frozen=True)
class AT_LEAST_ONE:  # noqa: N801 - read as a constant in the recorded shapes
    """A list with at least one element, each matching `item`."""

    item: Any


NONEMPTY = object()


def check_shape(value, shape, where: str = "") -> None:
    if shape is NONEMPTY:
        assert isinstance(value, str) and value, f"{where}: expected a non-empty string, got {value!r}"
    elif isinstance(shape, AT_LEAST_ONE):
        assert isinstance(value, list) and value, f"{where}: expected a non-empty list, got {value!r}"
        check_shape(value, [shape.item], where)
    elif isinstance(shape, NULLABLE):
        if value is not None:
            check_shape(value, shape.type, where)
    elif isinstance(shape, type):
        assert isinstance(value, shape) and not (shape is int and isinstance(value, bool)), \
            f"{where}: expected {shape.__name__}, got {value!r}"
    elif isinstance(shape, dict):
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        for key, sub in shape.items():
            assert key in value, f"{where}: missing key {key!r} in {value!r}"
            check_shape(value[key], sub, f"{where}.{key}")
    elif isinstance(shape, list):
        assert isinstance(value, list), f"{where}: expected a list, got {value!r}"
        if len(shape) == 1:
            for i, item in enumerate(value):
                check_shape(item, shape[0], f"{where}[{i}]")
        else:
            assert len(value) == len(shape), f"{where}: expected {len(shape)} items, got {value!r}"
            for i, (item, sub) in enumerate(zip(value, shape, strict=True)):
                check_shape(item, sub, f"{where}[{i}]")
    else:
        assert value == shape, f"{where}: expected {shape!r}, got {value!r}"


@dataclass(frozen=True)
class Exchange:
    method: str
    path: str  # with `{name}` placeholders, filled when replayed
    shape: Any  # of the JSON answer; None for raw bytes
    json: Any = None
    status: int = 200
    params: dict = field(default_factory=dict)

    def request(self, subs: dict) -> dict:
        out: dict = {}
        if self.json is not None:
            out["json"] = _fill(self.json, subs)
        if self.params:
            out["params"] = _fill(self.params, subs)
        return out


def _fill(value, subs):
    if isinstance(value, str):
        whole = value[1:-1] if value.startswith("{") and value.endswith("}") else None
        if whole in subs and not isinstance(subs[whole], str):
            return subs[whole]  # a number or flag stays one
        return value.format(**subs)
    if isinstance(value, dict):
        return {k: _fill(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, subs) for v in value]
    return value


OK = {"code": 200, "msg": ""}
REFUSED = {"code": int, "msg": NONEMPTY}
PFS_REFUSED = {"err": NONEMPTY}
ENTRY = {"Path": str, "ModTime": int, "Size": int, "IsDir": bool}
TIME = NULLABLE(str)

# `paddlectl submit -jobname {job} ... {package}`: the package's files, then the job.
SUBMIT_FILE_PATH = "/pfs/{dc}/home/{user}/jobs/{job}/{relpath}"
SUBMIT = Exchange("POST", "/api/v1/jobs/", OK, json={
    "name": "{job}", "jobPackage": "{package}", "parallelism": 2, "cpu": 1, "gpu": 0, "memory": "1Gi",
    "pservers": 1, "pscpu": 1, "psmemory": "1Gi", "entry": "python train.py", "topology": "",
    "datacenter": "{dc}", "passes": 1, "image": "", "registry": "", "faulttolerant": False,
    "maxInstance": 0, "minInstance": 0})
# seed 003's spelling of the same request
SUBMIT_SEED003 = Exchange("POST", "/api/v1/jobs/", OK, json={
    "name": "{job}", "job_package": "{package}", "parallelism": 1, "cpu": "1", "gpu": 0, "memory": "1Gi",
    "pservers": 0, "entry": "python train.py", "datacenter": "{dc}", "passes": 1, "min_instance": 0})
SUBMIT_REFUSED = Exchange("POST", "/api/v1/jobs/", REFUSED, json={
    "name": "{job}", "jobPackage": "{package}", "parallelism": 1, "cpu": 1, "memory": "1Gi", "pservers": 0,
    "entry": "python train.py", "datacenter": "{dc}"})

# `paddlectl get jobs`
GET_PSERVERS = Exchange("GET", "/api/v1/pservers/", {"items": [{
    "metadata": {"name": str}, "status": {"ready_replicas": NULLABLE(int), "replicas": int}}]})
GET_JOBS = Exchange("GET", "/api/v1/jobs/", {"items": [{
    "metadata": {"name": str}, "spec": {"parallelism": int},
    "status": {"succeeded": NULLABLE(int), "failed": NULLABLE(int), "active": NULLABLE(int),
               "start_time": TIME, "completion_time": TIME}}], "terminating": [str]})
# `paddlectl get workers {job}`: the client reads container_statuses[0] of every pod, and
# `items` of every answer (an unknown job has none)
CONTAINER_STATE = {"waiting": NULLABLE({"reason": str}), "running": NULLABLE(dict),
                   "terminated": NULLABLE({"exit_code": int, "message": NULLABLE(str)})}
GET_WORKERS = Exchange("GET", "/api/v1/workers/", {"items": [{
    "metadata": {"name": str}, "status": {"phase": str, "start_time": TIME,
                                          "container_statuses": AT_LEAST_ONE({"state": CONTAINER_STATE})}}]},
    params={"jobname": "{job}"})
GET_WORKERS_NONE = Exchange("GET", "/api/v1/workers/", {"kind": "PodList", "items": []}, params={"jobname": "{job}"})
# `paddlectl get quota`
QUOTA_VALUES = {"requests.cpu": str, "requests.memory": str, "alpha.kubernetes.io/nvidia-gpu": str, "pods": str}
GET_QUOTA = Exchange("GET", "/api/v1/quota/", {"items": [{"status": {"hard": QUOTA_VALUES, "used": QUOTA_VALUES}}]})
# `paddlectl logs {job}`: no trailing slash
LOGS = Exchange("GET", "/api/v1/logs", {"code": 200, "msg": NONEMPTY}, params={"jobname": "{job}", "n": "10", "w": ""})
LOGS_REFUSED = Exchange("GET", "/api/v1/logs", REFUSED, params={"jobname": "{job}", "n": "10", "w": ""})
# `paddlectl kill [-rm] {job}`: the client sends only the name, with or without -rm
KILL = Exchange("DELETE", "/api/v1/jobs/", OK, json={"jobname": "{job}"})
KILL_REFUSED = Exchange("DELETE", "/api/v1/jobs/", REFUSED, json={"jobname": "{job}"})

# `paddlectl registry -name {reg} ...`, `get registry`, `delete registry`
REGISTRY_ADD = Exchange("POST", "/api/v1/registry/", OK, json={
    "name": "pcloud-registry-{reg}", "username": "alice", "password": "s3cret", "server": "registry.example.com"})
REGISTRY_GET = Exchange("GET", "/api/v1/registry/", {"code": 200, "msg": {"items": [{
    "metadata": {"name": str, "creation_timestamp": str}}]}})
REGISTRY_DELETE = Exchange("DELETE", "/api/v1/registry/", OK, json={"name": "pcloud-registry-{reg}"})

# `paddlectl file`: one multipart upload per file; downloads are raw bytes
FILE_LIST = Exchange("GET", "/api/v1/filelist/", {"msg": "", "items": [str]}, params={"dc": "{dc}", "path": "{path}"})
PUBLISH_GET = Exchange("GET", "/api/v1/publish/", {"files": [str], "urls": [str]})
PUBLISH = Exchange("POST", "/api/v1/publish/", {"url": str}, json={"path": "{path}"})

# PFS: `paddlectl ls/mkdir/rm/cp`
LS = Exchange("GET", "/api/v1/pfs/files", {"err": "", "results": [ENTRY]},
              params={"method": "ls", "r": "{r}", "arg": "{path}"})
STAT = Exchange("GET", "/api/v1/pfs/files", {"err": "", "results": ENTRY}, params={"method": "stat", "path": "{path}"})
STAT_MISSING = Exchange("GET", "/api/v1/pfs/files", {"err": NONEMPTY}, params={"method": "stat", "path": "{path}"})
TOUCH = Exchange("POST", "/api/v1/pfs/files", {"err": "", "results": ENTRY},
                 json={"method": "touch", "filesize": "{size}", "path": "{path}"})
MKDIR = Exchange("POST", "/api/v1/pfs/files", {"err": "", "results": [ENTRY]},
                 json={"method": "mkdir", "path": ["{path}"]})
RM = Exchange("DELETE", "/api/v1/pfs/files", {"err": "", "results": list},
              json={"method": "rm", "r": True, "path": ["{path}"]})
RM_FILES = Exchange("DELETE", "/api/v1/pfs/files", {"err": "", "results": [{"Path": str}]},
                    json={"method": "rm", "r": False, "path": ["{path}"]})
TOUCH_REFUSED = Exchange("POST", "/api/v1/pfs/files", PFS_REFUSED,
                         json={"method": "touch", "filesize": "{size}", "path": "{path}"})
CHUNK_META = Exchange("GET", "/api/v1/pfs/chunks",
                      {"err": "", "results": {"offset": int, "checksum": str, "len": int}},
                      params={"method": "GetChunkMeta", "path": "{path}", "offset": "{offset}",
                              "chunksize": "{chunksize}"})
