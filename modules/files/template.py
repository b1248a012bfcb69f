"""Render a Jinja2 template from the controller and write it to the host.

Ansible's `template`: `src` is looked up in the role's `templates/`, then the playbook's
`templates/`, then the playbook directory, and rendered in the same sandbox as playbook
expressions with the task's variables. As in Ansible, the newline after a block tag
(`{% ... %}`, `{# ... #}`) is dropped (Jinja's trim_blocks; `+%}` keeps it). Written
atomically, with `validate` and `backup`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    Change,
    Result,
    TaskContext,
    TaskFailed,
    TemplateError,
    Unchanged,
    controller_files,
    render_text,
)
from modules.files.filework import CONTENT_PROPERTIES, Content, apply_content, controller_file, plan_content

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("dest",)
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["src", "dest"],
    "properties": {
        "src": {"type": "string", "description": "The template on the controller."},
        "dest": {"type": "string", "description": "Absolute path of the file on the host."},
        "force": {
            "type": "boolean",
            "default": True,
            "description": "Replace a file whose content differs; false: only create a missing file.",
        },
        **CONTENT_PROPERTIES,
    },
}


_BLOCK_END_NEWLINE = re.compile(r"(?<!\+)([%#]\})\n")


def _rendered(ctx: TaskContext, name: str) -> bytes:
    source = controller_file(ctx, name, "templates")
    try:
        text = controller_files.read_text(source)
    except OSError as exc:
        raise TaskFailed(f"cannot read template {source}: {exc.strerror}") from None
    try:
        return render_text(_BLOCK_END_NEWLINE.sub(r"\1", text), ctx.vars).encode("utf-8")
    except TemplateError as exc:
        raise TaskFailed(f"template {source}: {exc}") from None


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    change = plan_content(ctx, args, Content(args["dest"], _rendered(ctx, args["src"])), "render")
    if change is None or (not args["force"] and change.payload["previous"] is not None):
        return Unchanged(f"{args['dest']} is up to date", {"dest": args["dest"]})
    return change


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=apply_content(ctx, args, change))
