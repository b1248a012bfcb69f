"""A stand-in for the GPU side of torch, for scripts/gpu_device_check.py on a GPU-less machine.

Only what that script's child calls: ``torch.empty(n, dtype=torch.uint8, device="cuda:N")``,
``.fill_()`` and ``torch.cuda.synchronize(device)``. "Allocating" registers this process in
the fake NVML's JSON file (FAKE_NVML_CONFIG) as a compute process on GPU N holding n bytes,
so the real nvidia-ml-py then lists it, and killing the process frees the memory. Like
real CUDA it opens /dev/nvidia0: a decoy (a node that is really /dev/null, on a tmpfs over
/dev) in this process's own private mount namespace, so nothing outside it sees the node.
"""

from __future__ import annotations

import ctypes
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


CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
_DEVICE_FDS: list[int] = []


def _open_decoy_device(gpu: int) -> None:
    """Hold /dev/nvidiaN open as a CUDA context does, in a private mount namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not _DEVICE_FDS:
        if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "fake torch: cannot make a private mount namespace (needs root)")
        if libc.mount(b"fake-torch-dev", b"/dev", b"tmpfs", 0, b"size=64k,mode=755") != 0:
            raise OSError(ctypes.get_errno(), "fake torch: cannot mount a tmpfs over /dev")
        os.mknod("/dev/null", 0o20666, os.makedev(1, 3))
    node = f"/dev/nvidia{gpu}"
    if not os.path.exists(node):
        os.mknod(node, 0o20666, os.makedev(1, 3))
    _DEVICE_FDS.append(os.open(node, os.O_RDWR))


class cuda:  # mirrors the torch.cuda namespace
    @staticmethod
    def synchronize(device: str | None = None) -> None:
        path = os.environ["FAKE_NVML_CONFIG"]
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
        for gpu, size in _PENDING:
            _open_decoy_device(gpu)
            config["processes"].append({"pid": os.getpid(), "gpu": gpu, "used_mib": -(-size // 2**20)})
        _PENDING.clear()
        tmp = f"{path}.torch.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(config, handle)
        os.replace(tmp, path)
