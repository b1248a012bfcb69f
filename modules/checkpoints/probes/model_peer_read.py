"""Read one byte range of a model file for a copy to a peer host (read-only).

args: {"path": str, "offset": int, "length": int, "identity": [dev, ino, size, mtime_ns] | None}
The path is resolved by the guarded primitive's judged walk (fileio ``follow``: a link
another user made leads only to that user's own files), and the real path is opened with
O_NOFOLLOW and O_NONBLOCK: a regular file only. The first read answers the file's
identity; every later read of the same copy passes it back and is refused when the file
opened is not that one any more (replaced, or rewritten in place), so one copy never
mixes two files. answer: {"data": base64 of the bytes, "length": int, "identity": [...]}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)

import base64
import os
import stat

MAX_LENGTH = 4 * 2**20  # spread_model's largest chunk_mib


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def main(args: dict[str, Any]) -> dict[str, Any]:
    length = int(args["length"])
    if not 0 <= length <= MAX_LENGTH:
        raise ValueError(f"a read of {length} bytes is outside 0..{MAX_LENGTH}")
    real = call("fileio", {"op": "follow", "path": args["path"]})
    if real["refusal"]:
        raise PermissionError(real["refusal"])
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(real["real"], flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"refusing to read {args['path']}: not a regular file")
        if args.get("identity") is not None and list(args["identity"]) != _identity(st):
            raise PermissionError(f"{args['path']} changed since the copy began (replaced or rewritten); start again")
        data = os.pread(fd, length, int(args["offset"]))
    finally:
        os.close(fd)
    return {"data": base64.b64encode(data).decode(), "length": len(data), "identity": _identity(st)}
