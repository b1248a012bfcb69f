"""Read-only: a Ray node rigger started on this host, and every other Ray process here.

Runs under the python that has Ray (``run_probe_under``), so it can use Ray's own list of
the processes ``ray stop`` kills (``RAY_PROCESSES``); without Ray it falls back to the
core daemons (raylet, gcs_server).

Args: ``state_path`` (the node's state file), ``port`` (a TCP port whose listener to
report, the head's GCS port; optional).
Answer: ``record`` (the state file, or None), ``state_error``, ``leader_alive`` (the
recorded ``ray start --block`` process is still the one rigger started: pid and start
time, same boot), ``session`` (the live processes rigger can prove are this node's, by
identity: the recorded leader, raylet and members and their descendants; see
``recorded_tree``: never by session id), ``ray_processes`` (every live process on the
host that ``ray stop`` would stop, each with ``in_session``, ``node_ip`` and ``gcs_address`` read from its command
line), ``port`` (the ``port_owner`` answer, when asked), ``ray_version``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("procs", "port_owner", "recorded_tree", "fileio")

import base64
import importlib
import json
import os
import re

CORE_DAEMONS = [["raylet", True], ["gcs_server", True]]
NODE_IP = re.compile(r"--node[_-]ip[_-]address[= ](\S+)")
GCS_ADDRESS = re.compile(r"--gcs[_-]address[= ](\S+)")
NODE_ID = re.compile(r"--node[_-]id[= ]([0-9a-f]+)")


def read_record(state_path: str) -> tuple[dict[str, Any] | None, str | None]:
    path = os.path.abspath(os.path.expanduser(state_path))
    try:  # the guarded read: a regular file, bounded, no untrusted link followed
        answer = call("fileio", {"op": "read", "path": path, "max_bytes": 1 << 20})
        if not answer["exists"]:
            return None, None
        return json.loads(base64.b64decode(answer["data"])), None
    except (OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def ray_rules() -> tuple[list[Any], str | None]:
    """Ray's own (keyword, match the name only) list, and its version."""
    try:
        constants = importlib.import_module("ray.autoscaler._private.constants")
        version = str(importlib.import_module("ray").__version__)
    except Exception:  # no Ray under this python: the daemons that make a node
        return CORE_DAEMONS, None
    return [list(rule) for rule in constants.RAY_PROCESSES], version


def is_ray(proc: dict[str, Any], rules: list[Any]) -> bool:
    return any(keyword in (proc["name"] if by_name else proc["cmdline"]) for keyword, by_name in rules)


def session_members(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The live processes the record identifies (see ``recorded_tree``)."""
    raylet = record.get("raylet")
    members = [*(record.get("members") or []), *([raylet] if isinstance(raylet, dict) else [])]
    answer = call("recorded_tree", {"record": {**record, "members": members}})
    return list(answer["processes"])


def described(proc: dict[str, Any], in_session: bool) -> dict[str, Any]:
    found = {
        name: pattern.search(proc["cmdline"])
        for name, pattern in (("node_ip", NODE_IP), ("gcs_address", GCS_ADDRESS), ("node_id", NODE_ID))
    }
    return {
        **proc,
        "in_session": in_session,
        **{name: match.group(1) if match else None for name, match in found.items()},
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    record, error = read_record(args["state_path"])
    session = session_members(record) if record else []
    ours = {p["pid"] for p in session}
    rules, version = ray_rules()
    everyone = call("procs", {})["processes"]
    ray_processes = [
        described(p, p["pid"] in ours) for p in everyone if p["state"] not in ("Z", "X") and is_ray(p, rules)
    ]
    leader = record is not None and any(
        p["pid"] == record.get("pid") and p["start_time"] == record.get("start_time") for p in session
    )
    answer: dict[str, Any] = {
        "record": record,
        "state_error": error,
        "leader_alive": leader,
        "session": [described(p, True) for p in session],
        "ray_processes": ray_processes,
        "ray_version": version,
        "port": None,
    }
    if args.get("port"):
        answer["port"] = call("port_owner", {"port": int(args["port"])})
    return answer
