"""The process contract: the environment every replica of a job gets, locally and on Kubernetes.

Pure functions of the job and the replicas' endpoints, so both backends build the same thing.
The names come from Paddle's fleet role makers plus the seed documents' legacy names, which
existing training programs still read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models import Job

RESERVED_ENV = frozenset({
    "TRAINING_ROLE", "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_TRAINERS_NUM", "POD_IP", "PADDLE_PORT",
    "PADDLE_TRAINER_ENDPOINTS", "PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT", "PADDLE_MASTER",
    "PADDLE_DISTRI_BACKEND", "TRAINER_ID", "TRAINERS", "PSERVERS", "PADDLE_INIT_TRAINER_ID",
    "PADDLE_INIT_NUM_GRADIENT_SERVERS", "PADDLE_INIT_PSERVERS", "PADDLE_INIT_PORT", "PADDLE_INIT_NUM_PASSES",
    "PADDLE_INIT_USE_GPU", "PADDLE_JOB_NAME", "ENTRY", "TRAINER_PACKAGE", "PADDLE_CLOUD_CURRENT_DATACENTER",
    "PADDLE_CLOUD_USERNAME", "PADDLE_PFS_HOME", "PADDLE_CHECKPOINT_DIR",
    # the Kubernetes backend's own (jobs/backends/kubernetes/manifests.py)
    "PADDLECLOUD_INDEX", "PADDLECLOUD_POD_NAME", "PADDLECLOUD_RUNTIME_READY",
})


def checkpoint_subpath(job: Job) -> str:
    """The job's checkpoint directory relative to its user's home: it survives restarts, resume
    and the job itself, and counts against the user's storage."""
    return f"jobs/{job.name}/checkpoints"


@dataclass(frozen=True)
class Topology:
    """Where every replica of a job listens: lists of "host:port", in index order."""

    pservers: list[str]
    trainers: list[str]


def replica_env(job: Job, role: str, index: int, topo: Topology, *, pfs_home: str, package: str) -> dict[str, str]:
    """Environment variables for replica `role`-`index` of `job`."""
    me = topo.pservers[index] if role == "pserver" else topo.trainers[index]
    host, port = me.rsplit(":", 1)
    env = {
        "PADDLE_JOB_NAME": job.name,
        "PADDLE_TRAINERS_NUM": str(job.trainers),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(topo.trainers),
        "POD_IP": host,
        "PADDLE_PORT": port,
        "TRAINERS": str(job.trainers),
        "PSERVERS": str(len(topo.pservers)),
        "PADDLE_INIT_NUM_GRADIENT_SERVERS": str(job.trainers),
        "PADDLE_INIT_NUM_PASSES": str(job.passes),
        "PADDLE_INIT_USE_GPU": "1" if job.gpu else "0",
        "PADDLE_INIT_PORT": (topo.pservers[0] if topo.pservers else me).rsplit(":", 1)[1],
        "PADDLE_INIT_PSERVERS": ",".join(p.rsplit(":", 1)[0] for p in topo.pservers),
        "ENTRY": job.entry,
        "TRAINER_PACKAGE": package,
        "PADDLE_CLOUD_CURRENT_DATACENTER": job.datacenter.name,
        "PADDLE_CLOUD_USERNAME": job.user.get_username(),
        "PADDLE_PFS_HOME": pfs_home,
        "PADDLE_CHECKPOINT_DIR": f"{pfs_home.rstrip('/')}/{checkpoint_subpath(job)}",
    }
    if role == "trainer":
        env.update({"PADDLE_TRAINER_ID": str(index), "TRAINER_ID": str(index), "PADDLE_INIT_TRAINER_ID": str(index)})
    if job.mode == "ps":
        env.update({
            "TRAINING_ROLE": "PSERVER" if role == "pserver" else "TRAINER",
            # Without this list Paddle silently trains locally, so it is always set in ps mode.
            "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(topo.pservers),
            "PADDLE_WITH_GLOO": "0",
        })
    else:
        env.update({
            "PADDLE_CURRENT_ENDPOINT": me,
            "PADDLE_MASTER": topo.trainers[0],
            "PADDLE_DISTRI_BACKEND": "nccl" if job.gpu else "gloo",
        })
    return env


def trainer_files(index: int, trainers: int) -> dict[str, str]:
    """Seed 004's `trainer_id` / `trainer_count` files, written where the replica starts."""
    return {"trainer_id": f"{index}\n", "trainer_count": f"{trainers}\n"}
