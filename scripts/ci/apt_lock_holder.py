"""Print who holds an apt/dpkg lock now ("pid NAME"), or nothing when all are free.

Used by scripts/ci/common.sh before each apt-get: on a fresh cloud VM unattended-upgrades
holds the dpkg lock for minutes, and apt-get fails at once on the lists lock (its
DPkg::Lock::Timeout covers only the dpkg locks). F_GETLK asks without taking the lock, so
an apt-get starting meanwhile is never the one refused. Stdlib only; the lock files come
from argv (the default: the locks apt-get update and install take).
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys

LOCKS = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock", "/var/cache/apt/archives/lock")
FLOCK = "@hhqqi4x"  # struct flock on Linux (x86-64, arm64): type, whence, start, len, pid


def holder_pid(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # missing (apt never ran) or unreadable: nothing to wait for here
    try:
        query = struct.pack(FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _, _, _, pid = struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    finally:
        os.close(fd)
    return None if kind == fcntl.F_UNLCK else pid


def process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
            return comm.read().strip()
    except OSError:
        return "?"


def main(paths: list[str]) -> int:
    for path in paths or LOCKS:
        pid = holder_pid(path)
        if pid is not None:
            print(f"process {pid} ({process_name(pid)}) on {path}")
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
