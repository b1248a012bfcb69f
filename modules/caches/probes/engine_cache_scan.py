"""What an engine cache tree holds: each regular file's size and sha256 (read-only).

args: {"root": str, "skip": [names at the top of root not to list (rigger's manifest)]}
The tree is walked by the one path walk (fileio ``list``: no symlink followed, no mount
point crossed, bounded) and every regular file read through fileio ``read_range`` (the
guarded read: the file judged and opened O_NOFOLLOW, its identity pinned across windows).
A symlink is listed in ``links`` and never read; a FIFO, socket or device in ``others``;
a part file an interrupted seed left (``.NAME.rigger-spread``) and fileio's temp files in
``parts``, never as cache files.
answer: {"exists": bool, "files": {relative name: {"size", "sha256"}}, "links": [...],
"others": [...], "parts": [...]}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)

import base64
import hashlib
import posixpath

WINDOW = 4 << 20  # fileio's MAX_RANGE_BYTES
PART_MARKERS = (".rigger-spread", ".rigger-tmp-")


def _digest(path: str, size: int) -> str:
    digest, offset, identity = hashlib.sha256(), 0, None
    while offset < size:
        window = {"op": "read_range", "path": path, "offset": offset, "length": WINDOW, "identity": identity}
        answer = call("fileio", window)
        if not answer["length"]:
            break
        digest.update(base64.b64decode(answer["data"]))
        offset += int(answer["length"])
        identity = answer["identity"]
    if offset != size:
        raise OSError(f"{path} changed while it was hashed ({offset} of {size} bytes)")
    return digest.hexdigest()


def main(args: dict[str, Any]) -> dict[str, Any]:
    root, skip = str(args["root"]), set(args.get("skip") or ())
    try:
        entries = call("fileio", {"op": "list", "path": root})["entries"]
    except FileNotFoundError:
        return {"exists": False, "files": {}, "links": [], "others": [], "parts": []}
    answer: dict[str, Any] = {"exists": True, "files": {}, "links": [], "others": [], "parts": []}
    for name, kind, _mode, size in entries:
        if name in skip or kind == "dir":
            continue
        if kind == "link":
            answer["links"].append(name)
        elif kind != "file":
            answer["others"].append(name)
        elif any(marker in posixpath.basename(name) for marker in PART_MARKERS):
            answer["parts"].append(name)
        else:
            path = posixpath.join(root, name)
            answer["files"][name] = {"size": int(size), "sha256": _digest(path, int(size))}
    return answer
