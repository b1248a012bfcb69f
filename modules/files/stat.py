"""Report facts about a path on the host (exists, type, size, mode, owner, checksum, times); never changes it.

Ansible's `stat`: register the result and read `result.stat.exists`, `.isdir`, `.isreg`,
`.islnk`, `.size`, `.mode`, `.uid`/`.pw_name`, `.gid`/`.gr_name`, `.mtime`, `.checksum`,
`.lnk_target`. The checksum is computed on the host; nothing is sent back but the digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, Unchanged
from modules.files.filework import host_facts, target_path

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("path",)
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["path"]}, {"required": ["dest"]}, {"required": ["name"]}],
    "properties": {
        "path": {"type": "string", "description": "The path on the host."},
        "dest": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "name": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "follow": {"type": "boolean", "default": False, "description": "Follow a symlink and report its target."},
        "get_checksum": {"type": "boolean", "default": True, "description": "Compute the file's checksum."},
        "checksum_algorithm": {
            "type": "string",
            "enum": ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"],
            "default": "sha1",
            "description": "Digest for checksum (Ansible's default is sha1).",
        },
    },
}


def _ansible_view(facts: Mapping[str, Any]) -> dict[str, Any]:
    if not facts.get("exists"):
        return {"exists": False}
    kind = facts["type"]
    view = {
        "exists": True,
        "path": facts["path"],
        "isdir": kind == "directory",
        "isreg": kind == "file",
        "islnk": kind == "link",
        "type": kind,
        "size": facts["size"],
        "mode": facts["mode"],
        "uid": facts["uid"],
        "gid": facts["gid"],
        "pw_name": facts["owner"],
        "gr_name": facts["group"],
        "mtime": facts["mtime"],
        "atime": facts["atime"],
        "ctime": facts["ctime"],
        "inode": facts["inode"],
        "dev": facts["dev"],
        "nlink": facts["nlink"],
        "readable": facts["readable"],
        "writeable": facts["writeable"],
        "executable": facts["executable"],
    }
    if "checksum" in facts:
        view["checksum"] = facts["checksum"]
    if kind == "link":
        view["lnk_target"] = facts["link_target"]
        view["lnk_source"] = facts["link_source"]
    return view


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    path = target_path(args, "path")
    checksum = args["checksum_algorithm"] if args["get_checksum"] else None
    facts = host_facts(ctx, [path], checksum=checksum, follow=args["follow"])["paths"][path]
    view = _ansible_view(facts)
    summary = (
        f"{path}: {view['type']}, {view['size']} bytes, mode {view['mode']}" if view["exists"] else f"{path}: absent"
    )
    return Unchanged(summary, {"stat": view})
