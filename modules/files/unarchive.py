"""Extract a tar (plain, gz, bz2, xz) or zip archive into an existing directory on the host.

Ansible's `unarchive`: `src` is a file on the controller (looked up as `copy` looks it up:
the role's `files/`, the playbook's `files/`, the playbook directory), or with
`remote_src` a file on the host. The archive is opened with Python's tarfile or zipfile
on the host and EVERY member name is judged before anything is extracted: an absolute
name, a `..` component, a symlink leading out of `dest`, a member below a symlink member,
a hard link to anything but an earlier file of the archive, or a device, FIFO or other
special file refuses the whole archive, and so does a member below a file member; so
does a link or a file on the way to a member inside `dest` (nothing is written through a
link, whoever made it). A `dest` that is itself a link is the directory it leads to, as
Ansible's isdir follows it, judged by the file primitive's rule for links. Each member is then
written through the file primitive: files atomically with the archive's mode, directories
made (their modes set last), links put in place. A member already in `dest` with the same
type, content (and link target), mode and asked owner is left alone, so a second run
changes nothing; Ansible's tar handler also compares modification times, rigger does
not. No owner is restored from the archive (files belong to the user the task runs as,
or to `owner`/`group` when given) and no setuid/setgid bit; `mode` (octal) is given to
every extracted file and directory, as Ansible gives it. `creates` skips the task when
that path exists; `list_files` returns the member names in `files`. The archive is held
in memory (at most 1 GiB) and, from the controller, sent to the host with the probe.
Check mode opens and judges the archive too and lists what would change. `src` URLs,
`include`/`exclude`, `keep_newer`, a symbolic `mode`, `extra_opts`, `validate_certs` and
the other arguments rigger does not act on are refused
by name (download with `get_url` first, then extract with `remote_src: true`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, Fills, ProbeError, Result, TaskContext, TaskFailed, Unchanged
from modules.files.filework import controller_file

HOST_PATHS = ("dest", "creates")
_MODE = re.compile(r"^0?[0-7]{3,4}\Z")
MAX_ARCHIVE_BYTES = 1 << 30

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["src", "dest"],
    "properties": {
        "src": {
            "type": "string",
            "description": "The archive: a file on the controller, or on the host with remote_src (no URL).",
        },
        "dest": {
            "type": "string",
            "description": "Absolute path of an existing directory on the host to extract into.",
        },
        "remote_src": {
            "type": "boolean",
            "default": False,
            "description": "src is already on the host (true), or on the controller (false).",
        },
        "creates": {"type": "string", "description": "Skip the task when this path exists on the host."},
        "owner": {"type": "string", "description": "User (name or uid) every extracted path gets."},
        "group": {"type": "string", "description": "Group (name or gid) every extracted path gets."},
        "mode": {
            "type": ["string", "integer"],
            "description": "Octal permissions every extracted file and directory gets (else the archive's).",
        },
        "list_files": {
            "type": "boolean",
            "default": False,
            "description": "Return the archive's member names in `files`.",
        },
    },
}


def _skipped(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged | None:
    creates = args.get("creates")
    if not creates:
        return None
    if ctx.conn.run_probe("path_info", {"paths": [creates]})["paths"][creates]["exists"]:
        return Unchanged(f"skipped, since {creates} exists", {"dest": args["dest"], "src": args["src"]})
    return None


def _source(ctx: TaskContext, args: Mapping[str, Any]) -> dict[str, Any]:
    """The probe's archive: a host path, or the controller file's bytes (base64)."""
    src = args["src"]
    if "://" in src:
        raise TaskFailed(f"src {src!r} is a URL: rigger's unarchive takes a file (download it with get_url first)")
    if args["remote_src"]:
        return {"path": src, "max_bytes": MAX_ARCHIVE_BYTES}
    path = controller_file(ctx, src, "files")
    if not path.is_file():
        raise TaskFailed(f"Source '{src}' not found (or not a file) at {path}")
    if path.stat().st_size > MAX_ARCHIVE_BYTES:
        raise TaskFailed(f"{path} is larger than {MAX_ARCHIVE_BYTES} bytes: copy it to the host, then use remote_src")
    return {"data": base64.b64encode(path.read_bytes()).decode()}


def _members(ctx: TaskContext, args: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = ctx.conn.run_probe("archive_members", {**source, **_attributes(args)})
    except ProbeError as exc:
        raise TaskFailed(str(exc).removeprefix("probe archive_members failed: ")) from None
    if answer["refusal"]:
        raise TaskFailed(str(answer["refusal"]))
    return answer


def _attributes(args: Mapping[str, Any]) -> dict[str, Any]:
    """dest, and the owner, group and octal mode asked for every member."""
    mode = args.get("mode")
    if mode is not None:
        text = f"{mode:o}" if isinstance(mode, int) else str(mode)
        if not _MODE.match(text):
            raise TaskFailed(
                f"mode: {mode!r} is not an octal mode (symbolic modes are not supported by unarchive here)"
            )
        mode = int(text, 8)
    return {"dest": args["dest"], "owner": args.get("owner"), "group": args.get("group"), "mode": mode}


def _data(args: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any]:
    data = {"dest": args["dest"], "src": args["src"], "handler": answer["handler"]}
    if args["list_files"]:
        data["files"] = list(answer["files"])
    return data


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    skipped = _skipped(ctx, args)
    if skipped is not None:
        return skipped
    answer = _members(ctx, args, _source(ctx, args))
    changes = answer["changes"]
    if not changes:
        return Unchanged(f"{args['src']} is already extracted in {args['dest']}", _data(args, answer))
    lines = "".join(f"{change['action']} {change['name']}\n" for change in changes)
    return Change(
        f"extract {len(changes)} member(s) of {args['src']} into {args['dest']}",
        (Diff(f"{args['dest']} (from {args['src']})", "", lines),),
        {"digest": answer["digest"], **_data(args, answer)},
        {f"archive:{args['src']}": f"sha256:{answer['digest']}"},
        (Fills(args["dest"], f"the members of {args['src']}"),),
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    request = {**_source(ctx, args), **_attributes(args), "digest": change.payload["digest"]}
    try:
        done = ctx.conn.run_probe("archive_extract", request)
    except ProbeError as exc:
        raise TaskFailed(str(exc).removeprefix("probe archive_extract failed: ")) from None
    data = {key: change.payload[key] for key in ("dest", "src", "handler", "files") if key in change.payload}
    data["extract_results"] = {"extracted": done["extracted"]}
    return Result(True, change.summary, diffs=change.diffs, data=data)
