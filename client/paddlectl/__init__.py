"""paddlectl: the PaddleCloud command-line client, its Python SDK, and helpers for training programs.

SDK (talks to the server)::

    from paddlectl import Client, PaddleJob
    client = Client.from_config()                   # ~/.paddle/config, like the CLI
    job = client.submit(PaddleJob(job_name="fit", entry_point="python train.py",
                                  trainer_package_path="./fit_a_line", pservers=2, trainers=2))
    for line in client.logs("fit", follow=True):
        print(line)

In-job helpers (standard library only, no server needed)::

    from paddlectl import runtime, dataset, recordio, log_metric

Importing `paddlectl` itself is cheap: the SDK (and httpx) load only when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "APIError", "Client", "ConfigError", "NotFound", "PaddleJob", "PaddlectlError", "CephFSVolume",
    "log_metric", "__version__",
]

_LAZY = {
    "Client": "sdk", "PaddleJob": "job", "CephFSVolume": "job",
    "APIError": "errors", "ConfigError": "errors", "NotFound": "errors", "PaddlectlError": "errors",
    "log_metric": "metrics",
}

if TYPE_CHECKING:
    from .errors import APIError, ConfigError, NotFound, PaddlectlError
    from .job import CephFSVolume, PaddleJob
    from .metrics import log_metric
    from .sdk import Client


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'paddlectl' has no attribute '{name}'")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
