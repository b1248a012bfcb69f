"""Shared by the HAProxy probes: one command over the runtime API socket, the answer text.

Args of the callers: ``socket`` (a unix socket path, or ``ipv4@HOST:PORT`` / ``HOST:PORT``
for a TCP stats socket), ``timeout_s``. One command per connection (HAProxy closes the
connection after answering when not in interactive mode).
"""

from __future__ import annotations

import os
import socket as sockets
import stat
from typing import Any

MAX_ANSWER = 4 * 2**20


def _address(where: str) -> tuple[int, Any]:
    if where.startswith("/") or where.startswith("~"):
        path = os.path.expanduser(where)
        info = os.lstat(path)  # a link is not judged here: refuse it
        if not stat.S_ISSOCK(info.st_mode):
            raise ValueError(f"{where} is not a socket")
        return sockets.AF_UNIX, path
    host, _, port = where.removeprefix("ipv4@").rpartition(":")
    return sockets.AF_INET, (host or "127.0.0.1", int(port))


def send(where: str, command: str, timeout_s: float) -> str:
    if "\n" in command or ";" in command:
        raise ValueError("one runtime API command at a time")
    family, address = _address(where)
    with sockets.socket(family, sockets.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(address)
        conn.sendall(command.encode() + b"\n")
        chunks, size = [], 0
        while size < MAX_ANSWER:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def main(args: dict[str, Any]) -> dict[str, Any]:
    try:
        return {
            "answer": send(str(args["socket"]), str(args["command"]), float(args.get("timeout_s", 5))),
            "error": None,
        }
    except (OSError, ValueError) as exc:
        return {"answer": "", "error": f"{type(exc).__name__}: {exc}"}
