"""The GPU room's host facts: GPUs (NVML, else nvidia-smi) with their health readings
(the ``gpu_health`` probe, read once: one clock read, no wait for XID events) and the
/dev/shm filesystem. ensure_gpus_healthy judges the same readings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("gpu_health",)

import os


def _disk(path: str) -> dict[str, Any] | None:
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return {
        "path": path,
        "total_mib": stat.f_blocks * stat.f_frsize // 2**20,
        "free_mib": stat.f_bavail * stat.f_frsize // 2**20,
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    gpu = call("gpu_health", {"clock_reads": 1, "xid_wait_ms": 0})
    return {
        "shm": _disk(args.get("shm_path", "/dev/shm")),
        "gpus": gpu.get("gpus", []),
        "gpu_count": len(gpu.get("gpus", [])),
        "gpu_backend": gpu.get("backend", "none"),
        "gpu_notes": gpu.get("notes", []),
        "gpu_errors": gpu.get("errors", []),
        "gpu_driver_version": gpu.get("driver_version"),
        "cuda_version": gpu.get("cuda_version"),
        "gpu_kernel_xids": gpu.get("kernel_xids", []),
        "gpu_kernel_log": gpu.get("kernel_log"),
    }
