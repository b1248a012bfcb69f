"""Read-only process table from /proc: who runs, in which session, since when.

Args: ``pids`` (only these), ``sid`` (only this session), ``match`` (regexes searched in
the process name and command line; any one matching is enough). Filters combine with AND.
``start_time`` is /proc/PID/stat field 22 (clock ticks since boot): with the pid and the
answer's ``boot_id`` it names one process for good, which is how callers guard against
PID reuse.

``gpu_devices: true`` adds to each process the NVIDIA GPU device files it has open
(/proc/PID/fd links to /dev/nvidiaN; /dev/nvidiactl and /dev/nvidia-uvm, which any CUDA
process opens whatever GPU it uses, do not count): what proves, on this host and in this PID
namespace, that a pid the driver reports really is a GPU holder. ``own: true`` adds
``rigger_pids`` {pid: why}: this probe's process, every rigger process on the host (the
remote interpreters, the run-lock holder, probe programs: their command line carries
OWN_MARK) and all their ancestors. Those are never signalled, whatever matched them.
"""

from __future__ import annotations

import os
import pwd
import re
from typing import Any

OWN_MARK = "rigger-host-process"
GPU_DEVICE = re.compile(r"^/dev/nvidia[0-9]+\Z")


def read_stat(pid: int) -> dict[str, Any] | None:
    """Fields of /proc/PID/stat, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None
    head, _, tail = raw.rpartition(")")
    comm = head.partition("(")[2]
    rest = tail.split()
    # rest[0] is field 3 (state); field N is rest[N - 3]
    return {
        "pid": int(pid),
        "name": comm,
        "state": rest[0],
        "ppid": int(rest[1]),
        "pgid": int(rest[2]),
        "sid": int(rest[3]),
        "start_time": int(rest[19]),
    }


def read_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def read_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return ""
    parts = [part for part in raw.split(b"\0") if part]
    return " ".join(part.decode("utf-8", "replace") for part in parts).strip()


def user_name(uid: int | None, cache: dict[int, str]) -> str | None:
    if uid is None:
        return None
    if uid not in cache:
        try:
            cache[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            cache[uid] = str(uid)
    return cache[uid]


def describe(pid: int, users: dict[int, str] | None = None) -> dict[str, Any] | None:
    """One process as a dict, or None when it is gone."""
    stat = read_stat(pid)
    if stat is None:
        return None
    uid = read_uid(pid)
    stat["uid"] = uid
    stat["user"] = user_name(uid, users if users is not None else {})
    stat["cmdline"] = read_cmdline(pid)
    return stat


def gpu_devices(pid: int) -> list[str]:
    """The NVIDIA GPU device files pid has open (sorted, unique); [] when none or unreadable."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    found = set()
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if GPU_DEVICE.match(target):
            found.add(target)
    return sorted(found)


def own_processes(self_pid: int) -> dict[int, str]:
    """{pid: why} for rigger's own processes on this host and their ancestors."""
    own = {self_pid: "rigger itself (the process running this probe)"}
    for pid in ancestors(self_pid):
        own.setdefault(pid, "an ancestor of rigger (its session, SSH login or sudo)")
    for pid in all_pids():
        if pid != self_pid and OWN_MARK in read_cmdline(pid):
            own.setdefault(pid, "rigger's own process on this host (remote interpreter or run-lock holder)")
            for parent in ancestors(pid):
                own.setdefault(parent, "an ancestor of one of rigger's own processes")
    own.pop(0, None)
    return own


def all_pids() -> list[int]:
    return sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit())


def ancestors(pid: int) -> list[int]:
    """Parent, grandparent, ... of pid up to (and including) PID 1."""
    chain = []
    seen = set()
    current = pid
    while current > 1 and current not in seen:
        seen.add(current)
        stat = read_stat(current)
        if stat is None:
            break
        current = stat["ppid"]
        if current > 0:
            chain.append(current)
    return chain


def boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("btime"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This boot's random id: start times count from boot, so an identity recorded on
    another boot names nothing that runs now."""
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _wanted(proc: dict[str, Any], sid: int | None, patterns: list[re.Pattern[str]]) -> bool:
    if sid is not None and proc["sid"] != sid:
        return False
    if patterns:
        return any(p.search(proc["name"]) or p.search(proc["cmdline"]) for p in patterns)
    return True


def main(args: dict[str, Any]) -> dict[str, Any]:
    pids = args.get("pids")
    sid = args.get("sid")
    patterns = [re.compile(p) for p in args.get("match") or []]
    users: dict[int, str] = {}
    processes = []
    for pid in pids if pids is not None else all_pids():
        proc = describe(int(pid), users)
        if proc is not None and _wanted(proc, sid, patterns):
            if args.get("gpu_devices"):
                proc["gpu_devices"] = gpu_devices(proc["pid"])
            processes.append(proc)
    self_pid = os.getpid()
    answer = {
        "self_pid": self_pid,
        "self_uid": os.geteuid(),
        "self_ancestors": ancestors(self_pid),
        "boot_time": boot_time(),
        "boot_id": boot_id(),
        "clock_ticks": os.sysconf("SC_CLK_TCK"),
        "processes": processes,
    }
    if args.get("own"):
        answer["rigger_pids"] = {str(pid): why for pid, why in own_processes(self_pid).items()}
    return answer
