"""The GPU room's host facts: GPUs (NVML, else nvidia-smi) and the /dev/shm filesystem."""

USES = ("gpus",)

import os


def _disk(path):
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return {
        "path": path,
        "total_mib": stat.f_blocks * stat.f_frsize // 2**20,
        "free_mib": stat.f_bavail * stat.f_frsize // 2**20,
    }


def main(args):
    gpu = call("gpus", {})
    return {
        "shm": _disk(args.get("shm_path", "/dev/shm")),
        "gpus": gpu.get("gpus", []),
        "gpu_count": len(gpu.get("gpus", [])),
        "gpu_backend": gpu.get("backend", "none"),
        "gpu_notes": gpu.get("notes", []),
        "gpu_driver_version": gpu.get("driver_version"),
        "cuda_version": gpu.get("cuda_version"),
    }
