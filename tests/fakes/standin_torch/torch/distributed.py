"""The stand-in torch.distributed (NOT real; see the package's docstring)."""

from __future__ import annotations

import os
import time
from typing import Any

NCCL_ERROR = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO)"


class TCPStore:
    """No network: the port it "opens" is the one asked for, or 1 for rank 0's port 0."""

    def __init__(self, host: str, port: int, world_size: int, is_master: bool, **kwargs: Any) -> None:
        self.port = port or 1


def init_process_group(backend: str, **kwargs: Any) -> None:
    mode = os.environ.get("STANDIN_TORCH", "hang")
    if mode == "fail" or (mode == "fail-rank-1" and kwargs.get("rank") == 1):
        raise RuntimeError(NCCL_ERROR.split(": ", 1)[1])


def all_reduce(tensor: Any) -> None:
    time.sleep(3600)  # the hang: the first all-reduce never completes
