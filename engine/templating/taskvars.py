"""The variables one task sees on one host, layered in Ansible's precedence order.

Lowest to highest: role defaults (every public role of the play, then the task's own
role), inventory and play variables (``host_vars``), role vars (public roles, then the
task's own), block and task ``vars:``, then host data (facts, registered results,
set_fact), role parameters, include parameters, extra vars. An include's loop item is
pinned above all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from engine import templating
from engine.model import Block, Play, Step, Task


def task_scope(
    task: Task, play: Play, host_vars: Mapping[str, Any], data: Mapping[str, Any], extra: Mapping[str, Any]
) -> templating.Scope:
    role = task.options.role
    templated: dict[str, Any] = {**play.role_defaults}
    if role is not None:
        templated.update(role.defaults)
    templated.update(host_vars)
    templated.update(play.role_vars)
    if role is not None:
        templated.update(role.vars)
        templated.update(role_path=role.path, role_name=role.name)
    templated.update(task.options.vars)
    params = {**(role.params if role is not None else {}), **task.options.params}
    return templating.Scope(templated, data, {**params, **extra}, pinned=task.options.pinned)


def with_pinned(step: Step, pinned: Mapping[str, Any]) -> Step:
    """The step (and everything inside it) with an include's loop variables pinned."""
    options = replace(step.options, pinned={**step.options.pinned, **pinned})
    if isinstance(step, Block):
        return replace(
            step,
            options=options,
            block=tuple(with_pinned(s, pinned) for s in step.block),
            rescue=tuple(with_pinned(s, pinned) for s in step.rescue),
            always=tuple(with_pinned(s, pinned) for s in step.always),
        )
    if step.include is not None:
        include = replace(
            step.include, options=replace(step.include.options, pinned={**step.include.options.pinned, **pinned})
        )
        preloaded = step.include.preloaded
        if preloaded is not None:
            include = replace(include, preloaded=tuple(with_pinned(s, pinned) for s in preloaded))
        return replace(step, options=options, include=include)
    return replace(step, options=options)
