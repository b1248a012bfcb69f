"""Who listens on a TCP port: /proc/net/tcp{,6} LISTEN sockets matched to /proc/PID/fd.

Args: ``port``. Answer: ``listening`` (some socket listens on the port), ``sockets``
[{"inode", "uid", "address"}], ``owners`` (processes holding one of those sockets, as the
``procs`` probe describes them), ``unresolved`` (a listening socket whose process could not
be seen, e.g. another user's process when not root). Read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("procs",)

import os

LISTEN = "0A"
TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _listening(port: int) -> list[dict[str, Any]]:
    sockets = []
    for table in TABLES:
        try:
            with open(table, encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            address, _, port_hex = fields[1].rpartition(":")
            if int(port_hex, 16) == int(port):
                sockets.append({"inode": int(fields[9]), "uid": int(fields[7]), "address": address})
    return sockets


def _holders(inodes: set[str]) -> list[int]:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(f"{fd_dir}/{name}") in wanted:
                    pids.add(int(entry))
                    break
            except OSError:
                continue
    return sorted(pids)


def main(args: dict[str, Any]) -> dict[str, Any]:
    sockets = _listening(args["port"])
    if not sockets:
        return {"listening": False, "sockets": [], "owners": [], "unresolved": False}
    pids = _holders({s["inode"] for s in sockets})
    owners = call("procs", {"pids": pids})["processes"] if pids else []
    return {"listening": True, "sockets": sockets, "owners": owners, "unresolved": not owners}
