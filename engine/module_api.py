"""The contract between the engine and a task module (see the architecture page).

A module is a file in ``modules/`` defining ``SCHEMA``, ``plan(ctx, args)`` and
``apply(ctx, args, change)``. ``plan`` is read-only and returns ``None`` when the host
is already in the declared state; ``apply`` makes the change and returns a ``Result``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.errors import CommandFailed, TaskFailed

if TYPE_CHECKING:
    from engine.connection.base import Connection

__all__ = [
    "Change",
    "CommandFailed",
    "Diff",
    "Result",
    "TaskContext",
    "TaskFailed",
    "Unchanged",
    "content_digest",
]


@dataclass(frozen=True)
class Diff:
    """Before/after of one thing (a file, a key, a process list). Only output renders it."""

    label: str
    before: str
    after: str


@dataclass(frozen=True)
class Change:
    """What ``apply`` would do. ``payload`` carries what apply needs (pids, paths).

    ``fingerprint`` names the host state the change was planned from, one entry per thing
    (``file:/etc/x.json`` -> its sha256, ``process:4242`` -> its start time and command,
    ``package:vllm`` -> a version). A saved plan is applied only while it still matches,
    so include what would make the reviewed change wrong if it moved; never a secret.
    """

    summary: str
    diffs: tuple[Diff, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: Mapping[str, str] = field(default_factory=dict)


def content_digest(data: bytes | None) -> str:
    """A fingerprint value for file contents: ``sha256:HEX``, or ``absent``."""
    return "absent" if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Unchanged:
    """``plan`` may return this instead of ``None`` to explain why nothing is to do.

    ``msg`` is shown on the ``ok`` line ("8 GPUs idle: 0 processes, max 3 MiB used");
    ``data`` is registered like a Result's data.
    """

    msg: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    """The outcome of a task on one host. ``data`` is what ``register:`` exposes.

    ``set_vars`` are host variables the task defines (``set_fact``).
    """

    changed: bool
    msg: str = ""
    failed: bool = False
    diffs: tuple[Diff, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    set_vars: Mapping[str, Any] = field(default_factory=dict)


ProgressFn = Callable[[str], None]


def _no_progress(_: str) -> None:
    return None


@dataclass(frozen=True)
class TaskContext:
    """Everything a module may use. Explicit, never global.

    ``conn`` is already scoped for the task: become, environment and timeout applied,
    and, while planning, refusing any write or signal.
    """

    host_name: str
    conn: Connection
    facts: Mapping[str, Any]
    vars: Mapping[str, Any]
    task_name: str = ""
    timeout_s: float | None = None
    progress: ProgressFn = _no_progress
