"""Wait until a TCP port is open, closed or drained, or a path (or a regex in it) appears or goes.

Ansible's `wait_for`: the checks run on the host (a port on `host`, default 127.0.0.1, is
seen from the host), every `sleep` seconds after `delay`, until `timeout`; progress says
what is still missing. It only reads, so it waits in check mode too. With neither `port`
nor `path` it just waits `timeout` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, TextRegex, Unchanged

ACTIVE_STATES = ["ESTABLISHED", "FIN_WAIT1", "FIN_WAIT2", "SYN_RECV", "SYN_SENT", "TIME_WAIT"]

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "host": {"type": "string", "default": "127.0.0.1", "description": "Address to connect to, from the host."},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "TCP port to watch."},
        "path": {"type": "string", "description": "File to watch (mutually exclusive with port)."},
        "state": {
            "type": "string",
            "enum": ["started", "stopped", "present", "absent", "drained"],
            "default": "started",
            "description": "Port: started (open), stopped (closed), drained (no active connections). "
            "Path: present/started (exists, regex found), absent/stopped (gone).",
        },
        "search_regex": {"type": "string", "description": "Regex to find in the file or in what the port sends."},
        "timeout": {"type": "number", "minimum": 0, "default": 300, "description": "Seconds to wait before failing."},
        "delay": {
            "type": "number",
            "minimum": 0,
            "default": 0,
            "description": "Seconds to wait before the first check.",
        },
        "sleep": {"type": "number", "minimum": 0, "default": 1, "description": "Seconds between checks."},
        "connect_timeout": {
            "type": "number",
            "minimum": 0,
            "default": 5,
            "description": "Seconds per connection attempt.",
        },
        "active_connection_states": {
            "type": "array",
            "items": {"type": "string"},
            "default": ACTIVE_STATES,
            "description": "TCP states that count as active connections for state drained.",
        },
        "msg": {"type": "string", "description": "Message to fail with instead of the default on timeout."},
    },
    "not": {"required": ["port", "path"]},
}


def _target(args: Mapping[str, Any]) -> str:
    if args.get("port") is not None:
        return f"{args['host']}:{args['port']}"
    return f"file {args['path']}"


def _wanted(args: Mapping[str, Any]) -> str:
    """The state in words: a path is present or absent, whichever name the task used."""
    if args.get("port") is not None:
        return str(args["state"])
    return "present" if args["state"] in ("started", "present") else "absent"


def _check(ctx: TaskContext, args: Mapping[str, Any]) -> dict[str, Any]:
    request = {k: args.get(k) for k in ("host", "port", "path", "state", "search_regex", "connect_timeout")}
    request["active_connection_states"] = list(args["active_connection_states"])
    answer = ctx.conn.run_probe("wait_check", request)
    text = answer.get("text")
    if not args.get("search_regex") or text is None:
        return answer
    # a fresh time budget for each look; multi-line, as Ansible's wait_for compiles it
    regex = TextRegex(args["search_regex"], "search_regex", multiline=True)
    # searched here, with a time bound: the probe only read (wait_check's docstring says why)
    match = regex.search(text)
    wanted = args["state"] in ("started", "present")
    if match is None:
        return {**answer, "met": not wanted and answer["met"], "groups": []}
    found = "port open and regex matched" if args.get("port") is not None else "regex matched"
    return {**answer, "met": wanted, "detail": found, "groups": list(match.groups())}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    started = time.monotonic()
    if args.get("port") is None and args.get("path") is None:
        ctx.conn.pause(args["timeout"])
        return Unchanged(f"waited {args['timeout']:g}s", {"elapsed": args["timeout"]})
    if args["state"] == "drained" and args.get("port") is None:
        raise TaskFailed("state drained needs port")
    ctx.conn.pause(args["delay"])
    deadline = started + args["timeout"]
    if args.get("search_regex"):
        TextRegex(args["search_regex"], "search_regex")  # an invalid regex fails before the wait
    while True:
        answer = _check(ctx, args)
        elapsed = time.monotonic() - started
        if answer["met"]:
            data = {"elapsed": round(elapsed, 3), "state": args["state"], "match_groups": answer["groups"]}
            data.update({k: args[k] for k in ("port", "path") if args.get(k) is not None})
            return Unchanged(f"{_target(args)} {_wanted(args)} after {elapsed:.1f}s", data)
        if time.monotonic() >= deadline:
            message = args.get("msg") or f"Timeout when waiting for {_target(args)} to be {_wanted(args)}"
            raise TaskFailed(f"{message} ({answer['detail']}, waited {elapsed:.0f}s)", {"elapsed": round(elapsed, 3)})
        waited = f"{elapsed:.0f}s/{args['timeout']:g}s"
        ctx.progress(f"waiting for {_target(args)} to be {_wanted(args)}: {answer['detail']} ({waited})")
        ctx.conn.pause(min(args["sleep"], deadline - time.monotonic()))
