"""Read a file on the host and return its content, base64-encoded (ansible.builtin.slurp).

Ansible's `slurp`: `src` (or `path`) names a file; the result's `content` is its bytes in
base64 (`encoding: base64`) and `source` the path, so `result.content | b64decode` is the text.
The file is read by the connection's read primitive (as every module reads a file); a
missing file or a directory fails the task, naming it. It changes nothing, so it runs the
same in check mode.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("src", "path")
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "oneOf": [{"required": ["src"]}, {"required": ["path"]}],
    "properties": {
        "src": {"type": "string", "description": "The file on the host to read."},
        "path": {"type": "string", "description": "Another name for src (Ansible's alias)."},
    },
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    source = args.get("src") or args["path"]
    data = ctx.conn.read_file(source)  # the read primitive refuses a directory, naming it
    if data is None:
        raise TaskFailed(f"slurp: file not found: {source}")
    return Unchanged(
        f"read {len(data)} bytes of {source}",
        {"content": base64.b64encode(data).decode("ascii"), "encoding": "base64", "source": source},
    )
