"""Ansible keywords rigger does not implement: refused by name, with file:line, before a
schema could say something misleading ("unknown key") about a perfectly valid playbook.

A keyword set to the value that means what rigger does anyway (``strategy: linear``,
``become_user: root``, ``become_method: sudo``) is accepted: each is Ansible's default, so it
means there what it means in ansible-core 2.19 (docs/ansible.md lists every keyword and value).
``diff`` and ``check_mode`` change what a task does and are read by the loader (``check_flags``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import ValidationError
from engine.playbook import loops
from engine.yamlload import line_of

# keyword -> values that rigger already honours (None: no value is accepted)
_ACCEPTED: dict[str, tuple[Any, ...] | None] = {
    "strategy": ("linear", "ansible.builtin.linear"),
    "order": ("inventory",),
    "become_method": ("sudo",),
    "force_handlers": (False,),
    "ignore_unreachable": (False,),
    "vars_prompt": None,
    "throttle": None,
    "debugger": None,
    "fact_path": None,
    "port": None,
    "become_exe": None,
    "become_flags": None,
}
# ansible-core 2.19's LoopControl keys rigger does not implement (it has loop_var,
# index_var and label)
_LOOP_CONTROL_LACKING = frozenset({"pause", "extended", "extended_allitems", "break_when"})
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
        if key == "loop_control" and isinstance(value, Mapping):
            lacked = sorted(k for k in value if k in _LOOP_CONTROL_LACKING)
            if lacked:
                raise _error(data, key, f"`loop_control: {lacked[0]}` is not supported by rigger "
                             "(it takes loop_var, index_var and label)")  # fmt: skip
        if where == "play" and key in IGNORED_PLAY_KEYS:
            continue
        if key in ("diff", "check_mode"):
            check_flags(data)
            continue
        if key not in _ACCEPTED:
            continue
        accepted = _ACCEPTED[key]
        if accepted is not None and (value in accepted or value is None):
            continue
        raise _error(data, key, _message(key, value))


# Set once per command from --allow-check-mode-false (engine/cli.py): a process-wide
# choice, read by the loader at load time and by includes loaded while the run goes.
_ALLOW = {"check_mode_false": False}
CHECK_MODE_FALSE_FLAG = "--allow-check-mode-false"


def allow_check_mode_false(allowed: bool) -> None:
    _ALLOW["check_mode_false"] = allowed


def check_flags(data: Mapping[str, Any]) -> None:
    """``check_mode`` and ``diff`` on a play, block or task: values rigger gives Ansible's
    meaning to, or a refusal that says what to do."""
    if "diff" in data:
        value = data["diff"]
        if not isinstance(value, bool) and not (isinstance(value, str) and "{{" in value):
            raise _error(data, "diff", f"`diff: {value}` is neither true nor false (nor a template giving one)")
    if "check_mode" not in data or data["check_mode"] is None:
        return
    value = data["check_mode"]
    if not isinstance(value, bool):
        raise _error(data, "check_mode", f"`check_mode: {value}`: write true or false (a template is not supported)")
    if value is False and not _ALLOW["check_mode_false"]:
        raise _error(
            data,
            "check_mode",
            "`check_mode: false` (run this task for real even under --check) is not supported: rigger's "
            "--check and plan never run a task for real. Remove it (a real run runs the task anyway), or pass "
            f"{CHECK_MODE_FALSE_FLAG} to `rigger run` or `validate` to run it in real runs and skip it, by name, "
            "under --check (`rigger plan` does not take it: a saved plan cannot review a task it did not plan)",
        )


def _error(data: Any, key: str, message: str) -> ValidationError:
    return ValidationError(message, file=getattr(data, "file", None) or None, line=line_of(data, key))


# ansible-core 2.19's action plugins without async support: a task of one with ``async`` fails
# there ("This action (debug) does not support async."); rigger refuses it at validate.
_NO_ASYNC = frozenset(
    {
        "add_host", "assemble", "assert", "copy", "debug", "fail", "fetch", "gather_facts", "group_by",
        "include_vars", "pause", "raw", "reboot", "script", "set_fact", "set_stats", "template", "unarchive",
        "validate_argument_spec", "wait_for_connection", "meta", "include_tasks", "include_role",
    }
)  # fmt: skip
ANSIBLE_POLL_DEFAULT = 15


def async_limit(data: Mapping[str, Any], module: str, ansible_module: bool) -> int | None:
    """``async: N`` with a poll interval: Ansible runs the task and fails it when it has not
    finished within N seconds. The controller waiting for it is what rigger does anyway, so it
    is the task's time limit here (rigger checks the task while it runs, not every ``poll``
    seconds). ``poll: 0`` (fire and forget, collected later with async_status) is refused."""
    seconds, poll = data.get("async", 0), data.get("poll", ANSIBLE_POLL_DEFAULT)
    if seconds == 0 or seconds is None:
        return None  # Ansible's default: synchronous; poll means nothing without async
    for key, value in (("async", seconds), ("poll", poll)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise _error(data, key, f"`{key}` takes a whole number of seconds here, not {value!r}")
    if poll == 0:
        raise _error(data, "poll", "`poll: 0` (fire and forget, collected later with async_status) is not "
                     "supported by rigger: drop `poll` to wait for the task with `async` as its time limit, "
                     "or run the command as a service")  # fmt: skip
    if module in _NO_ASYNC:
        raise _error(data, "async", f"This action ({module}) does not support async (as in Ansible)")
    if not ansible_module:
        raise _error(data, "async", f"`async` on rigger's {module} has no Ansible meaning: use `timeout`")
    return int(seconds)
