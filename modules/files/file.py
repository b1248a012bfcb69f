"""Make a path a directory, a file's attributes, a symlink, a hard link, a touched file, or absent.

Ansible's `file`: `state` is `file` (only attributes; the file must exist), `directory`
(parents created; `recurse` applies owner/group/mode to the whole tree), `link`/`hard`
(to `src`; an existing link to something else is replaced atomically, a file only with
`force`), `touch` (created if missing; times updated unless `modification_time` and
`access_time` are `preserve`), or `absent` (removed recursively; apply checks the path is
still the one the plan saw).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, Removes, Result, TaskContext, TaskFailed, Unchanged
from modules.files.filework import (
    ATTR_PROPERTIES,
    Attrs,
    host_facts,
    identity,
    judge_removal,
    parse_mode,
    refuse_unsafe_write,
    run_ops,
    target_path,
)

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("path", "dest", "name", "src")
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["path"]}, {"required": ["dest"]}, {"required": ["name"]}],
    "properties": {
        "path": {"type": "string", "description": "Absolute path on the host."},
        "dest": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "name": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "state": {
            "type": "string",
            "enum": ["file", "directory", "link", "hard", "touch", "absent"],
            "default": "file",
            "description": "What the path should be.",
        },
        "src": {"type": "string", "description": "Target of the link (state link or hard)."},
        "recurse": {
            "type": "boolean",
            "default": False,
            "description": "With state directory: set owner, group and mode on everything inside too.",
        },
        "force": {
            "type": "boolean",
            "default": False,
            "description": "With state link/hard: replace an existing file (never a directory).",
        },
        "follow": {
            "type": "boolean",
            "default": True,
            "description": "With state file, directory or touch: a symlink at path is followed and "
            "what it points to is changed (Ansible's default), judged like every link on the way: "
            "another user's link leads only to that user's own files. false: the link itself "
            "(owner and group; a link has no mode of its own).",
        },
        "modification_time": {
            "type": "string",
            "enum": ["now", "preserve"],
            "default": "now",
            "description": "With state touch: `preserve` keeps an existing file's times (idempotent).",
        },
        "access_time": {
            "type": "string",
            "enum": ["now", "preserve"],
            "default": "now",
            "description": "With state touch: see modification_time.",
        },
        **ATTR_PROPERTIES,
    },
}


def _describe(facts: Mapping[str, Any]) -> str:
    if not facts.get("exists"):
        return "absent\n"
    if facts["type"] == "link":
        return f"link -> {facts['link_target']}\n"
    return f"{facts['type']}\n"


def _state_diff(path: str, facts: Mapping[str, Any], after: str) -> Diff:
    return Diff(f"{path} (state)", _describe(facts), after)


def _plan_absent(ctx: TaskContext, path: str) -> Change | None:
    """Judged by identity on the host (path_judge): never `/`, a system or home directory,
    a mount point, or a directory holding one; a symlink is removed itself."""
    judged = judge_removal(ctx, path)
    if not judged["exists"]:
        return None
    real = judged["resolved"]
    kind = {"dir": "directory", "symlink": "link"}.get(judged["type"], judged["type"])
    op = {"op": "remove", "path": path, "identity": [judged["dev"], judged["ino"]]}
    diffs = (Diff(f"{real} (state)", f"{kind}\n", "absent\n"),)
    return Change(f"remove {kind} {real}", diffs, {"ops": [op]}, effects=(Removes(path), Removes(real)))


def _plan_directory(
    path: str, facts: Mapping[str, Any], attrs: Attrs, args: Mapping[str, Any], tree: Any
) -> Change | None:
    if facts.get("exists") and facts["type"] != "directory":
        raise TaskFailed(f"{path} exists and is a {facts['type']}, not a directory")
    diffs = [] if facts.get("exists") else [_state_diff(path, facts, f"directory{attrs.describe(directory=True)}\n")]
    diffs += attrs.diffs(path, facts)
    if args["recurse"] and tree:
        diffs.append(Diff(f"{path} (contents)", "\n".join(tree) + "\n", "owner/group/mode as asked\n"))
    if not diffs:
        return None
    ops = [] if facts.get("exists") else [{"op": "mkdir", "path": path}]
    ops.append(attrs.op(path, recurse=args["recurse"]))
    verb = "create directory" if not facts.get("exists") else "set attributes of"
    return Change(f"{verb} {path}", tuple(diffs), {"ops": ops})


def _plan_link(
    path: str, facts: Mapping[str, Any], src_facts: Mapping[str, Any], attrs: Attrs, args: Mapping[str, Any]
) -> Change | None:
    hard = args["state"] == "hard"
    src = args["src"]
    if hard:
        current = (
            facts.get("exists")
            and src_facts.get("exists")
            and facts["inode"] == src_facts["inode"]
            and facts["dev"] == src_facts["dev"]
        )
        if not src_facts.get("exists"):
            raise TaskFailed(f"cannot hard link to {src}: it does not exist")
    else:
        current = facts.get("type") == "link" and facts["link_target"] == src
    diffs = attrs.diffs(path, facts, with_mode=False) if current else []
    if current and not diffs:
        return None
    if facts.get("exists") and not current:
        if facts["type"] == "directory":
            raise TaskFailed(f"{path} is a directory; not replacing it with a link")
        if facts["type"] != "link" and not args["force"]:
            raise TaskFailed(f"{path} exists and is a {facts['type']}; set force: true to replace it with a link")
    ops: list[dict[str, Any]] = []
    if not current:
        diffs.insert(0, _state_diff(path, facts, f"{'hard link to' if hard else 'link ->'} {src}\n"))
        ops.append({"op": "hardlink" if hard else "symlink", "path": path, "src": src, "identity": identity(facts)})
    if attrs.owner is not None or attrs.group is not None:
        ops.append(attrs.op(path, with_mode=hard))
    return Change(f"link {path} -> {src}", tuple(diffs), {"ops": ops})


def _plan_touch(path: str, facts: Mapping[str, Any], attrs: Attrs, args: Mapping[str, Any]) -> Change | None:
    update_times = facts.get("exists") and "now" in (args["modification_time"], args["access_time"])
    diffs = [] if facts.get("exists") else [_state_diff(path, facts, "file\n")]
    diffs += attrs.diffs(path, facts)
    if not diffs and not update_times:
        return None
    ops = [{"op": "touch", "path": path, "update_times": bool(update_times)}, attrs.op(path)]
    return Change(f"touch {path}", tuple(diffs), {"ops": ops})


def _plan_file(path: str, facts: Mapping[str, Any], attrs: Attrs) -> Change | None:
    if not facts.get("exists"):
        raise TaskFailed(f"file {path} is absent, cannot continue (use state: touch to create it)")
    diffs = attrs.diffs(path, facts)
    if not diffs:
        return None
    return Change(f"set attributes of {path}", tuple(diffs), {"ops": [attrs.op(path)]})


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    path, state = target_path(args, "path"), args["state"]
    if state == "absent":
        change = _plan_absent(ctx, path)
        return change or Unchanged(f"{path} is absent", {"path": path, "state": state})
    if state in ("link", "hard") and "src" not in args:
        raise TaskFailed(f"state {state} needs src")
    paths = [path, args["src"]] if state == "hard" else [path]
    tree = {"path": path, "mode": parse_mode(args.get("mode"))} if state == "directory" and args["recurse"] else None
    follow = args["follow"] and state in ("file", "directory", "touch")
    answer = host_facts(ctx, paths, owner=args.get("owner"), group=args.get("group"), tree=tree, follow_links=follow)
    facts = answer["paths"][path]
    refuse_unsafe_write(facts)
    if facts.get("via_link"):  # the link judged on the host: what it points to is the path
        path = facts["path"]
        if tree:
            answer = host_facts(
                ctx, [path], owner=args.get("owner"), group=args.get("group"), tree={**tree, "path": path}
            )
            facts = answer["paths"][path]
    attrs = Attrs.wanted(args, answer)
    if state == "directory":
        change = _plan_directory(path, facts, attrs, args, answer.get("tree_mismatches"))
    elif state in ("link", "hard"):
        change = _plan_link(path, facts, answer["paths"].get(args["src"], {}), attrs, args)
    elif state == "touch":
        change = _plan_touch(path, facts, attrs, args)
    else:
        change = _plan_file(path, facts, attrs)
    if change is None:
        return Unchanged(f"{path} is {state}", {"path": path, "state": state})
    return change


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    run_ops(ctx, change.payload["ops"])
    return Result(
        changed=True,
        msg=change.summary,
        diffs=change.diffs,
        data={"path": target_path(args, "path"), "state": args["state"]},
    )
