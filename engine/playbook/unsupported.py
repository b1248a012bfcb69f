"""Ansible keywords rigger does not implement: refused by name, with file:line, before a
schema could say something misleading ("unknown key") about a perfectly valid playbook.

A keyword set to the value that means what rigger does anyway (``strategy: linear``,
``become_method: sudo``) is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import ValidationError
from engine.playbook import loops
from engine.yamlload import line_of

# keyword -> values that rigger already honours (None: no value is accepted)
_ACCEPTED: dict[str, tuple[Any, ...] | None] = {
    "strategy": ("linear",),
    "order": ("inventory",),
    "become_method": ("sudo",),
    "force_handlers": (False,),
    "check_mode": (False,),
    "diff": (False,),
    "ignore_unreachable": (False,),
    "vars_prompt": None,
    "module_defaults": None,
    "throttle": None,
    "debugger": None,
    "fact_path": None,
    "port": None,
    "async": (0,),
    "poll": None,
    "become_exe": None,
    "become_flags": None,
}
# Read by the loader, not by the schema (collections: where roles are searched), or ignored
# because they change nothing rigger does (gathering takes milliseconds).
IGNORED_PLAY_KEYS = frozenset({"collections", "gather_timeout"})
# ansible-core 2.19's keywords at each level (Play/Block/Task.fattributes): one rigger lacks
# is refused as a keyword it does not support, never as an unknown key or module.
_BOTH = frozenset(
    {
        "any_errors_fatal", "become", "become_exe", "become_flags", "become_method", "become_user", "check_mode",
        "collections", "connection", "debugger", "diff", "environment", "ignore_errors", "ignore_unreachable",
        "module_defaults", "name", "no_log", "port", "remote_user", "run_once", "tags", "throttle", "timeout", "vars",
    }
)  # fmt: skip
ANSIBLE_KEYWORDS = {
    "play": _BOTH | {
        "fact_path", "force_handlers", "gather_facts", "gather_subset", "gather_timeout", "handlers", "hosts",
        "max_fail_percentage", "order", "post_tasks", "pre_tasks", "roles", "serial", "strategy", "tasks",
        "vars_files", "vars_prompt",
    },
    "block": _BOTH | {"always", "block", "delegate_facts", "delegate_to", "notify", "rescue", "when"},
    "task": _BOTH | {
        "action", "args", "async", "changed_when", "delay", "delegate_facts", "delegate_to", "failed_when",
        "local_action", "loop", "loop_control", "notify", "poll", "register", "retries", "until", "when",
    },
}  # fmt: skip


def lacking(key: Any, where: str) -> str | None:
    """Why ``key`` is refused when it is an Ansible keyword at this level rigger does not take."""
    if isinstance(key, str) and key in ANSIBLE_KEYWORDS[where]:
        return f"`{key}` on a {where} is not supported by rigger (it is an Ansible keyword rigger does not implement)"
    return None


_HINTS = {
    "strategy": "rigger runs plays with the linear strategy",
    "async": "run long commands as a service, or with command's timeout",
    "become_method": "rigger becomes root or another user with sudo only",
}


def _message(key: str, value: Any) -> str:
    shown = f"`{key}: {value}`" if isinstance(value, (str, int, float, bool)) and len(str(value)) < 40 else f"`{key}`"
    hint = _HINTS.get(key)
    return f"{shown} is not supported" + (f" ({hint})" if hint else "")


def check(data: Mapping[str, Any], where: str) -> None:
    """Raise for the first keyword in a play/block/task mapping rigger cannot honour."""
    for key, value in data.items():
        if not isinstance(key, str):
            continue
        if key.startswith("with_") and key[len("with_") :] not in loops.WITH_KINDS:
            raise _error(data, key, f"`{key}` loops are not supported (write it as `loop:`)")
        if key == "include":
            instead = "import_playbook" if where == "play" else "include_tasks or import_tasks"
            raise _error(data, key, f"`include` was removed from Ansible (2.16); use {instead}")
        if key == "vars_files" and isinstance(value, list) and any(isinstance(v, list) for v in value):
            raise _error(data, key, "`vars_files` with a list of alternatives (first found) is not supported")
        if where == "play" and key in IGNORED_PLAY_KEYS:
            continue
        if key not in _ACCEPTED:
            continue
        accepted = _ACCEPTED[key]
        if accepted is not None and (value in accepted or value is None):
            continue
        raise _error(data, key, _message(key, value))


def _error(data: Any, key: str, message: str) -> ValidationError:
    return ValidationError(message, file=getattr(data, "file", None) or None, line=line_of(data, key))
