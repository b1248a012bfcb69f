"""Host facts in one round trip: identity, OS, CPU, memory, python, /dev/shm, GPUs."""

USES = ("gpus",)

import os
import platform
import socket
import sys


def _os_release():
    fields = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.strip().partition("=")
                if sep:
                    fields[key] = value.strip('"')
    except OSError:
        pass
    return {
        "id": fields.get("ID", platform.system().lower()),
        "version_id": fields.get("VERSION_ID", ""),
        "pretty_name": fields.get("PRETTY_NAME", platform.platform()),
    }


def _mem_total_mib():
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


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
        "hostname": socket.gethostname(),
        "fqdn": socket.getfqdn() if args.get("fqdn") else socket.gethostname(),
        "os": _os_release(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu_count": os.cpu_count(),
        "mem_total_mib": _mem_total_mib(),
        "python": {
            "executable": sys.executable,
            "version": platform.python_version(),
        },
        "user": os.environ.get("USER") or str(os.getuid()),
        "uid": os.getuid(),
        "shm": _disk(args.get("shm_path", "/dev/shm")),
        "gpus": gpu.get("gpus", []),
        "gpu_count": len(gpu.get("gpus", [])),
        "gpu_backend": gpu.get("backend", "none"),
        "gpu_notes": gpu.get("notes", []),
        "gpu_errors": gpu.get("errors", []),
        "gpu_driver_version": gpu.get("driver_version"),
        "cuda_version": gpu.get("cuda_version"),
    }
