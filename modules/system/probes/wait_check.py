"""One look at what `wait_for` waits for: a TCP port, connections on it, a path, a regex in a file.

With ``search_regex`` the probe does not search: it returns the text (``text``: the file
through the guarded read, at most 16 MiB; what the port sent, at most 64 KiB) and the
controller searches it with a time bound (engine/userregex.py ``TextRegex``): Python's
``re`` on the host has none, and a backtracking regex would hang the probe."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)
MAX_SEARCH_BYTES = 16 << 20

import base64
import os
import socket
from typing import Any

_TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


MAX_PORT_BYTES = 65536
PORT_QUIET_S = 0.25  # once data came, a pause this long ends the read: the regex is tried on it


def _port_open(args: dict[str, Any]) -> tuple[bool, str, str | None]:
    try:
        with socket.create_connection((args["host"], args["port"]), timeout=args["connect_timeout"]) as sock:
            if not args.get("search_regex"):
                return True, "port open", None
            sock.settimeout(args["connect_timeout"])
            data = b""
            while len(data) < MAX_PORT_BYTES:
                try:
                    chunk = sock.recv(4096)
                except TimeoutError:
                    break
                if not chunk:
                    break
                data += chunk
                sock.settimeout(PORT_QUIET_S)
            return True, "port open, regex not seen", data[:MAX_PORT_BYTES].decode("utf-8", "replace")
    except OSError as exc:
        return False, f"port closed ({exc.strerror or exc})", None


def _active_connections(port: int, states: set[str]) -> int:
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and _TCP_STATES.get(fields[3]) in states:
                count += 1
    return count


def _path(args: dict[str, Any]) -> tuple[bool, str, str | None]:
    path = args["path"]
    if not os.path.exists(path):
        return False, "path absent", None
    if not args.get("search_regex"):
        return True, "path present", None
    try:  # the guarded read: a FIFO or a device is refused at once, a file read bounded
        answer = call("fileio", {"op": "read", "path": path, "max_bytes": MAX_SEARCH_BYTES})
    except OSError as exc:
        return False, f"cannot read: {exc.strerror or exc}", None
    return True, "regex not found yet", base64.b64decode(answer["data"] or "").decode("utf-8", "replace")


def main(args: dict[str, Any]) -> dict[str, Any]:
    """``met`` and ``detail``; with ``search_regex``, ``text`` to search (None: nothing to
    search, ``met`` stands)."""
    state = args["state"]
    if args.get("port") is not None:
        if state == "drained":
            count = _active_connections(args["port"], set(args["active_connection_states"]))
            return {"met": count == 0, "detail": f"{count} active connection(s)", "groups": []}
        is_open, detail, text = _port_open(args)
        met = is_open if state in ("started", "present") else not is_open
        return {"met": met, "detail": detail, "groups": [], "text": text}
    present, detail, text = _path(args)
    met = present if state in ("started", "present") else not os.path.exists(args["path"])
    return {"met": met, "detail": detail, "groups": [], "text": text}
