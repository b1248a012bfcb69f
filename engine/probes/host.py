"""Generic host facts in one round trip: identity, OS, CPU, memory, python (rooms add theirs)."""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any


def _os_release() -> dict[str, str]:
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


def _mem_total_mib() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def main(args: dict[str, Any]) -> dict[str, Any]:
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
    }
