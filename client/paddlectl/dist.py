"""`paddlectl.dist.train(...)`: seed 001's one-call submission, a thin wrapper over Client.submit.

    import paddlectl.dist
    paddlectl.dist.train(job_name="quickstart", package_path="./quick_start", trainers=8, pservers=4,
                         input="/pfs/dc1/home/me/quickstart/input", output="/pfs/dc1/home/me/quickstart/output",
                         base_image="paddlepaddle/paddle:2.6.2", use_gpu=False)

`input`/`output` reach every process as $PADDLE_INPUT_DIR / $PADDLE_OUTPUT_DIR. Credentials come
from ~/.paddle/config unless `endpoint` plus `k8s_user`/`k8s_password` (seed 001's names) or
`token` are given.
"""

from __future__ import annotations

from typing import Any

from .job import PaddleJob
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
    variables = dict(env or {})
    if input:
        variables["PADDLE_INPUT_DIR"] = input
    if output:
        variables["PADDLE_OUTPUT_DIR"] = output
    job = PaddleJob(job_name=job_name, trainer_package_path=package_path, entry_point=entry_point, trainers=trainers,
                    pservers=0 if mode == "collective" else pservers, runtime_image=base_image, mode=mode,
                    gpu_nums=trainer_gpu_num if use_gpu else 0, env=variables, **kwargs)
    if endpoint:
        client = Client(endpoint, token=token, username=k8s_user, password=password, datacenter=datacenter)
    else:
        client = Client.from_config(datacenter)
    with client:
        created = client.submit(job)
        return client.wait(job_name, timeout=timeout) if wait else created
