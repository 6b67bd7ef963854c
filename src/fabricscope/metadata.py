"""Metadata that travels with every result: versions, host, and the variables that steer NCCL.

Collected without importing anything heavy: torch's version is read only
when torch is already imported by the caller.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping
from typing import Any

from fabricscope import __version__

__all__ = ["ENV_PREFIXES", "collect_env", "relevant_variables"]

ENV_PREFIXES = (
    "NCCL_",
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_",
    "GLOO_",
    "UCX_",
    "CUDA_VISIBLE_DEVICES",
    "MASTER_",
)
"""Environment variables kept in results: they change what a measurement means."""


def relevant_variables(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


def collect_env(**extra: Any) -> dict[str, Any]:
    """Versions and platform, the NCCL-related variables, plus whatever the caller adds."""
    data: dict[str, Any] = {
        "fabricscope": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "variables": relevant_variables(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        data["torch"] = str(torch.__version__)
        cuda = getattr(torch.version, "cuda", None)
        if cuda:
            data["cuda"] = cuda
    data.update(extra)
    return data
