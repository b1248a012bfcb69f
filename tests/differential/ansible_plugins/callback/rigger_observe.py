"""Ansible callback for the differential suite: what ansible-core did, as JSON lines.

Loaded into the real ansible-playbook by tests/differential/harness.py (never by rigger).
It writes one JSON object per event to the file named by RIGGER_OBSERVE_FILE, in the
same vocabulary the harness reads from ``rigger run --output jsonl``: plays with their
hosts, tasks, per-host statuses with debug values, and the recap.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: rigger_observe
type: aggregate
short_description: record plays, task statuses and the recap as JSON lines
description: Used by rigger's differential test suite.
"""


def _plain(value: Any) -> Any:
    """Ansible's tagged strings and lazy containers as plain JSON values."""
    return json.loads(json.dumps(value, default=str))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "rigger_observe"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._path = os.environ.get("RIGGER_OBSERVE_FILE", "ansible-observed.jsonl")
        self._play_uuid = ""

    def _write(self, **event: Any) -> None:
        with open(self._path, "a", encoding="utf-8") as stream:
            stream.write(json.dumps(_plain(event)) + "\n")

    def v2_playbook_on_play_start(self, play: Any) -> None:
        # called once per serial batch: the harness wants the play once, with all its hosts
        inventory = play.get_variable_manager()._inventory
        hosts = [h.name for h in inventory.get_hosts(play.hosts, order=play.order, ignore_restrictions=True)]
        if play._uuid != self._play_uuid:
            self._play_uuid = play._uuid
            self._write(event="play_start", name=play.get_name(), hosts=hosts)

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._write(event="task_start", name=task.get_name(), module=task.action, handler=False)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._write(event="task_start", name=task.get_name(), module=task.action, handler=True)

    def _result(self, result: Any, status: str, ignored: bool = False) -> None:
        data = result.result
        if status == "ok" and data.get("changed"):
            status = "changed"
        value = None
        if result.task.action in ("debug", "ansible.builtin.debug") and status == "ok":
            hidden = ("changed", "failed", "warnings", "deprecations")
            value = {k: v for k, v in data.items() if not k.startswith("_ansible") and k not in hidden}
        self._write(
            event="task_result",
            host=result.host.name,
            task=result.task.get_name(),
            status=status,
            ignored=ignored,
            value=value,
        )

    def v2_runner_on_ok(self, result: Any) -> None:
        self._result(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._result(result, "failed", ignored=ignore_errors)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        recap = {}
        for host in sorted(stats.processed):
            counts = stats.summarize(host)
            counts["failed"] = counts.pop("failures")
            recap[host] = counts
        self._write(event="recap", hosts=recap)
