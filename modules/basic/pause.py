"""Wait a number of seconds or minutes (ansible.builtin.pause), on every host of the task at once.

Ansible's `pause` with `seconds` or `minutes`: the play waits that long (in check mode too, as
Ansible does) and the result gives `start`, `stop`, `delta` (whole seconds) and `echo`. A
stopping run (Ctrl-C, SIGTERM) does not wait it out. `prompt` is shown as the task's message
when a wait is given; a prompt that waits for the user's Enter (no seconds or minutes) is
refused by name: rigger never stops a fleet run to read the keyboard.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged

NUMBER = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"}]}
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "seconds": {**NUMBER, "description": "How long to wait, in seconds."},
        "minutes": {**NUMBER, "description": "How long to wait, in minutes (seconds wins when both are given)."},
        "prompt": {"type": "string", "description": "Shown as the task's message while it waits."},
        "echo": {"type": "boolean", "default": True, "description": "Ansible's echo of typed input (nothing is read)."},
    },
}


def _seconds(args: Mapping[str, Any]) -> float:
    if "seconds" in args:
        return float(args["seconds"])
    if "minutes" in args:
        return float(args["minutes"]) * 60
    raise TaskFailed(
        "pause without seconds or minutes waits for the user to press Enter: rigger never reads the "
        "keyboard during a run; give seconds: or minutes:"
    )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    wait_s = _seconds(args)
    started = datetime.now()
    began = time.monotonic()
    ctx.conn.pause(wait_s)
    stopped = datetime.now()
    shown = args.get("prompt") or f"Paused for {wait_s:g} seconds"
    data = {
        "start": str(started),
        "stop": str(stopped),
        "delta": int(time.monotonic() - began),
        "echo": args["echo"],
        "user_input": "",
    }
    return Unchanged(shown, data)
