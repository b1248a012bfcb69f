"""Ansible's ``check_mode`` task keyword, and what a task skipped in check mode registers.

``check_mode: true`` plans the task in a real run and changes nothing (as ansible-core
2.19: ``ansible_check_mode`` stays false). ``check_mode: false`` would run the task for real
under ``--check``; rigger's check mode never does (docs/safety.md), so the loader refuses it
unless ``--allow-check-mode-false`` says the user takes the difference: then the task is
skipped while checking, by name, never silently (docs/ansible.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.model import TaskOptions

NOT_RUN_WHILE_CHECKING = (
    "check_mode: false: not run under --check (check mode never runs a task for real; a real run does)"
)
# The modules whose skipped check-mode result ansible-core 2.19 shapes as an empty command
# result (its command module's "Command would have run if not in check mode").
_COMMAND_SHAPED = frozenset({"command", "shell"})


def task_check_mode(options: TaskOptions) -> bool | None:
    """The task's ``check_mode`` keyword (None: not set). The loader admits booleans only."""
    flag = options.check_mode
    return None if flag is None else bool(flag)


def skipped_data(module: str, payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a command task skipped in check mode registers, as ansible-core 2.19 registers
    it: empty output, rc 0 and null times, so ``x.stdout_lines`` is ``[]`` and
    ``when: x.rc == 0`` holds, instead of an undefined variable."""
    if module not in _COMMAND_SHAPED:
        return {}
    argv = (payload or {}).get("argv")
    return {
        **({"cmd": list(argv)} if isinstance(argv, (list, tuple)) else {}),
        "rc": 0,
        "stdout": "",
        "stderr": "",
        "start": None,
        "end": None,
        "delta": None,
    }
