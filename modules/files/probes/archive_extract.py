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


def _apply(dest: str, change: dict[str, Any], contents: dict[str, bytes]) -> None:
    path, action, mode = _under(dest, change["name"]), change["action"], change["mode"]
    _parents(dest, change["name"])
    if action == "mkdir":
        call("fileio", {"op": "mkdir", "path": path})
    elif action == "attrs" and change["kind"] == "dir":
        pass  # directory modes are set last: a read-only one still takes its files
    elif action == "attrs":
        call("fileio", {"op": "attrs", "path": path, "mode": mode})
    elif action == "write":
        data = base64.b64encode(contents[change["name"]]).decode()
        call("fileio", {"op": "write", "path": path, "data": data, "mode": mode})
    elif action == "symlink":
        call("fileio", {"op": "symlink", "path": path, "src": change["link"]})
    elif action == "hardlink":
        target = "/".join(part for part in change["link"].split("/") if part not in ("", "."))
        call("fileio", {"op": "hardlink", "path": path, "src": _under(dest, target)})
    else:
        raise ValueError(f"archive_extract: unknown action {action!r}")


def main(args: dict[str, Any]) -> dict[str, Any]:
    answer = call("archive_members", {**args, "with_contents": True})
    if answer["refusal"]:
        raise ValueError(answer["refusal"])
    if args.get("digest") and answer["digest"] != args["digest"]:
        raise ValueError("the archive changed since it was planned (its sha256 differs); nothing was extracted")
    dest = answer["dest"]  # a link at dest: the directory it leads to, judged
    for change in answer["changes"]:
        _apply(dest, change, answer["contents"])
    for change in reversed(answer["changes"]):
        if change["kind"] == "dir":
            call("fileio", {"op": "attrs", "path": _under(dest, change["name"]), "mode": change["mode"]})
    return {"extracted": [change["raw"] for change in answer["changes"]], "handler": answer["handler"]}
