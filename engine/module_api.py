"""The contract between the engine and a task module, and everything a module may import.

A module is a file in a room (``modules/<room>/``, listed in the room's ``MODULES``)
defining a docstring, ``SCHEMA`` (JSON Schema; every argument has a ``description``),
``plan(ctx, args)`` and, unless it is read-only, ``apply(ctx, args, change)``.

- ``args`` arrive validated, with the schema's defaults filled in: index them
  (``args["port"]``); never repeat a default in code.
- ``plan`` only reads (``ctx.conn`` refuses writes, commands not marked ``read_only`` and
  mutating probes while planning). It returns ``None`` or ``Unchanged`` when the host is
  already in the declared state, else a ``Change``; ``apply`` makes that change and
  returns a ``Result``.
- A read-only module (checks, messages, variables) has no ``apply``: ``plan`` does the
  whole job and returns ``Unchanged`` (its ``msg``, ``data``, ``warnings``, ``set_vars``),
  or raises ``TaskFailed``. It therefore runs the same in check mode.
- ``CHECK_MODE = "skip"`` marks a module whose plan cannot tell what apply would do
  (``command``): in check mode its task is skipped. ``CHECK_MODE = "measure"``: one
  that changes nothing but measures only for real (``check_serving``'s benchmark):
  skipped in check mode too, and never counted as a change in a saved plan.
- A ``Change`` declares its ``effects`` (what the host looks like after apply): planning
  carries them forward, so later tasks plan against them (engine/connection/predicted.py).
- A failure on the host is ``TaskFailed`` (or ``ProbeError``, ``CommandFailed``, an
  ``OSError``): the engine reports it as the task's failure, naming the host. Anything
  else escaping a module is reported as a bug in rigger.

Modules import from this file only (and from their own room).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine import controller_files
from engine.baselines import BaselineKey, BaselineStore, Measurement
from engine.baselines.noise import Verdict, judge
from engine.commandline import APT_PACKAGE, PIP_REQUIREMENT, command_line, operand, operands
from engine.connection.base import Become, CommandResult, Connection, ScopedConnection
from engine.connection.effects import Effect, Fills, Removes, Starts, Stops, Writes
from engine.errors import CommandFailed, TaskFailed, TemplateError, WriteRefused
from engine.facts import FactSource, prefixed
from engine.keypaths import keypath_diff, same_value
from engine.probes import ProbeError
from engine.run.batches import batch_size, batches
from engine.userregex import TextRegex, UserRegex

__all__ = [
    "APT_PACKAGE",
    "PIP_REQUIREMENT",
    "BaselineKey",
    "BaselineStore",
    "Become",
    "Change",
    "CommandFailed",
    "CommandResult",
    "Diff",
    "Effect",
    "FactSource",
    "Fills",
    "Measurement",
    "ProbeError",
    "Removes",
    "Result",
    "ScopedConnection",
    "Starts",
    "Stops",
    "TaskContext",
    "TaskFailed",
    "TemplateError",
    "TextRegex",
    "Unchanged",
    "UserRegex",
    "Verdict",
    "WriteRefused",
    "Writes",
    "batch_size",
    "batches",
    "command_line",
    "content_digest",
    "controller_files",
    "evaluate",
    "judge",
    "keypath_diff",
    "operand",
    "operands",
    "prefixed",
    "render",
    "render_loaded",
    "render_text",
    "same_value",
    "to_bool",
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

    ``effects`` say what the host looks like after apply (``Writes``, ``Removes``,
    ``Fills``, ``Stops``, ``Starts``): planning carries them forward, so a later task's
    plan reads the files, processes and servers this change would leave. Declare every
    effect a later task could read; what is not declared is read from the host as it is.
    """

    summary: str
    diffs: tuple[Diff, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    effects: tuple[Effect, ...] = ()
    # The class of change, for policies that allow some and not others (``rigger watch``
    # heals ``serve_vllm:down`` but leaves ``serve_vllm:spec`` to a person): a short word
    # the module documents, "" when the module has one kind of change only.
    kind: str = ""


def content_digest(data: bytes | None) -> str:
    """A fingerprint value for file contents: ``sha256:HEX``, or ``absent``."""
    return "absent" if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Unchanged:
    """``plan`` may return this instead of ``None`` to explain why nothing is to do.

    ``msg`` is shown on the ``ok`` line ("8 GPUs idle: 0 processes, max 3 MiB used");
    ``data`` is registered like a Result's data; ``set_vars`` are host variables a
    read-only module defines (``set_fact``).
    """

    msg: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    set_vars: Mapping[str, Any] = field(default_factory=dict)


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
    conn: ScopedConnection
    facts: Mapping[str, Any]
    vars: Mapping[str, Any]
    task_name: str = ""
    timeout_s: float | None = None
    progress: ProgressFn = _no_progress
    connect: Callable[[str], Connection] | None = None

    def peer(self, host: str) -> ScopedConnection:
        """Another inventory host, for a module that acts on a group as one (run with
        ``run_once``): reached with that host's own variables and run lock, as
        ``delegate_to`` reaches it, with this task's scope (become, environment, and
        refusing writes while planning). An unreachable peer raises ``HostUnreachable``; a
        peer whose run lock cannot be taken fails the task."""
        if self.connect is None:
            raise TaskFailed(f"no connection to {host}: this task runs outside a play's inventory")
        return replace(self.conn, inner=self.connect(host))


# Templating helpers, imported on use: a module's own code must load without jinja2 (the
# GPU room's tests run it under a bare system python as another user).


def render(value: Any, variables: Mapping[str, Any]) -> Any:
    """Render templates in ``value`` (strings, lists, mappings) with these variables."""
    from engine import templating

    return templating.render(value, variables)


def render_loaded(loaded: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
    """Variables a task read from a user's file (``include_vars``), each rendered with the
    others beside the task's variables, as Ansible renders vars files; a value that
    cannot be rendered yet (it names a variable defined later) is kept as written."""
    from engine import templating

    scope = (
        variables.layered(loaded)
        if isinstance(variables, templating.Scope)
        else templating.Scope({**variables, **loaded}, {})
    )
    rendered = {}
    for key in loaded:
        try:
            rendered[key] = scope[key]
        except TemplateError:
            rendered[key] = loaded[key]
    return rendered


def render_text(source: str, variables: Mapping[str, Any]) -> str:
    """A whole template file rendered to text: never a native value, trailing newline kept."""
    from engine import templating

    return templating.render_text(source, variables)


def evaluate(expression: Any, variables: Mapping[str, Any]) -> Any:
    """The value of a Jinja expression without braces (``when:``-style)."""
    from engine import templating

    return templating.evaluate(expression, variables)


def to_bool(value: Any) -> bool:
    """Ansible's truthiness of a value ("yes", "on", 1, ...)."""
    from engine.templating.filters import to_bool as convert

    return convert(value)
