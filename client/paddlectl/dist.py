"""`paddlectl.dist.train(...)`: seed 001's one-call submission, a thin wrapper over Client.submit.

    import paddlectl.dist
    paddlectl.dist.train(job_name="quickstart", package_path="./quick_start", trainers=8, pservers=4,
                         input="/pfs/dc1/home/me/quickstart/input", output="/pfs/dc1/home/me/quickstart/output",
                         base_image="paddlepaddle/paddle:2.6.2", use_gpu=False)

`input`/`output` reach every process as $PADDLE_INPUT_DIR / $PADDLE_OUTPUT_DIR (a path not under
/pfs, like seed 001's `/quickstart/input`, is taken inside your home). Credentials come
from ~/.paddle/config unless `endpoint` plus `k8s_user`/`k8s_password` (seed 001's names) or
`token` are given.
"""

from __future__ import annotations

from typing import Any

from . import config as cfgmod
from .job import PaddleJob
from .pfs_paths import in_home
from .sdk import Client


def train(job_name: str, package_path: str = ".", entry_point: str = "python train.py", trainers: int = 1,
          pservers: int = 1, input: str | None = None, output: str | None = None,  # noqa: A002
          base_image: str = "", use_gpu: bool = False, trainer_gpu_num: int = 1, env: dict[str, str] | None = None,
          mode: str = "ps", endpoint: str | None = None, k8s_user: str | None = None,
          k8s_password: str | None = None, token: str | None = None, datacenter: str | None = None,
          wait: bool = False, timeout: float | None = None, **kwargs: Any) -> dict[str, Any]:
    """Submit a job (uploading `package_path` if it is local); returns the job. With wait=True,
    returns once it has ended."""
    password = k8s_password or kwargs.pop("k8s_pssword", None)  # seed 001's spelling
    job = PaddleJob(job_name=job_name, trainer_package_path=package_path, entry_point=entry_point, trainers=trainers,
                    pservers=0 if mode == "collective" else pservers, runtime_image=base_image, mode=mode,
                    gpu_nums=trainer_gpu_num if use_gpu else 0, env=dict(env or {}), **kwargs)
    if endpoint:
        client = Client(endpoint, token=token, username=k8s_user, password=password, datacenter=datacenter)
    elif k8s_user:
        # Seed 001's call names the user but not the server: the config's paddleServer.
        dc = cfgmod.select(cfgmod.load(), datacenter)
        client = Client(dc.endpoint, token=token, username=k8s_user, password=password, datacenter=dc.server_name,
                        usercert=dc.usercert, userkey=dc.userkey, cacert=dc.cacert)
    else:
        client = Client.from_config(datacenter)
    with client:
        for var, path in (("PADDLE_INPUT_DIR", input), ("PADDLE_OUTPUT_DIR", output)):
            if path:
                job.env[var] = client.pfs_path(in_home(client.home(), path))
        created = client.submit(job)
        return client.wait(job_name, timeout=timeout) if wait else created
