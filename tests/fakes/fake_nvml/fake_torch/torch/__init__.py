"""A stand-in for the GPU side of torch, for scripts/gpu_device_check.py on a GPU-less machine.

Only what that script's child calls: ``torch.empty(n, dtype=torch.uint8, device="cuda:N")``,
``.fill_()`` and ``torch.cuda.synchronize(device)``. "Allocating" registers this process in
the fake NVML's JSON file (FAKE_NVML_CONFIG) as a compute process on GPU N holding n bytes,
so the real nvidia-ml-py then lists it, and killing the process frees the memory.
"""

from __future__ import annotations

import json
import os

uint8 = "uint8"
_PENDING: list[tuple[int, int]] = []


class _Block:
    def fill_(self, value: int) -> _Block:
        return self


def empty(size: int, dtype: str = uint8, device: str = "cpu") -> _Block:
    if not device.startswith("cuda:"):
        raise RuntimeError("the fake torch only allocates on cuda:N")
    _PENDING.append((int(device.split(":")[1]), int(size)))
    return _Block()


class cuda:  # mirrors the torch.cuda namespace
    @staticmethod
    def synchronize(device: str | None = None) -> None:
        path = os.environ["FAKE_NVML_CONFIG"]
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
        for gpu, size in _PENDING:
            config["processes"].append({"pid": os.getpid(), "gpu": gpu, "used_mib": -(-size // 2**20)})
        _PENDING.clear()
        tmp = f"{path}.torch.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(config, handle)
        os.replace(tmp, path)
