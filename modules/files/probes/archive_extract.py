"""Extract a judged tar or zip archive into ``dest``, every member through the file primitive.

The archive is read and judged again here (``archive_members``), just before anything is
written: it must still be the archive the plan saw (``digest``, its sha256), and dest must
still take it. Directories are made with ``fileio`` mkdir (their mode set after), files
written atomically with their mode, symlinks and hard links put in place by ``fileio``;
nothing is written through a link, no archive owner and no setuid/setgid bit is restored.
Answer: ``extracted`` (the member names written or changed).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("archive_members", "fileio")


def _under(dest: str, name: str) -> str:
    return f"{dest.rstrip('/')}/{name}"


def _parents(dest: str, name: str) -> None:
    directory = name.rpartition("/")[0]
    if directory:
        call("fileio", {"op": "mkdir", "path": _under(dest, directory)})


def _attrs(path: str, owners: dict[str, Any], mode: int | None) -> None:
    uid, gid = owners.get("uid"), owners.get("gid")
    if uid is None and gid is None and mode is None:
        return
    call("fileio", {"op": "attrs", "path": path, "uid": -1 if uid is None else uid,
                    "gid": -1 if gid is None else gid, "mode": mode})  # fmt: skip


def _apply(dest: str, change: dict[str, Any], contents: dict[str, bytes], owners: dict[str, Any]) -> None:
    path, action, kind, mode = _under(dest, change["name"]), change["action"], change["kind"], change["mode"]
    _parents(dest, change["name"])
    if action == "mkdir":
        call("fileio", {"op": "mkdir", "path": path})
    elif action == "write":
        data = base64.b64encode(contents[change["name"]]).decode()
        call("fileio", {"op": "write", "path": path, "data": data, "mode": mode})
    elif action == "symlink":
        call("fileio", {"op": "symlink", "path": path, "src": change["link"]})
    elif action == "hardlink":
        target = "/".join(part for part in change["link"].split("/") if part not in ("", "."))
        call("fileio", {"op": "hardlink", "path": path, "src": _under(dest, target)})
    elif action != "attrs":
        raise ValueError(f"archive_extract: unknown action {action!r}")
    if kind in ("file", "symlink"):  # a link has no mode of its own; directories are done last
        _attrs(path, owners, mode if kind == "file" else None)


def main(args: dict[str, Any]) -> dict[str, Any]:
    answer = call("archive_members", {**args, "with_contents": True})
    if answer["refusal"]:
        raise ValueError(answer["refusal"])
    if args.get("digest") and answer["digest"] != args["digest"]:
        raise ValueError("the archive changed since it was planned (its sha256 differs); nothing was extracted")
    dest = answer["dest"]  # a link at dest: the directory it leads to, judged
    for change in answer["changes"]:
        _apply(dest, change, answer["contents"], answer["owners"])
    for change in reversed(answer["changes"]):  # last: a read-only directory still took its files
        if change["kind"] == "dir":
            _attrs(_under(dest, change["name"]), answer["owners"], change["mode"])
    return {"extracted": [change["raw"] for change in answer["changes"]], "handler": answer["handler"]}
