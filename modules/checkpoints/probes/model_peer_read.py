"""Read one byte range of a model file for a copy to a peer host (read-only).

args: {"path": str, "offset": int, "length": int, "identity": [dev, ino, size, mtime_ns] | None}
Through the guarded primitive (fileio ``read_window``, op read_range): the path resolved by the judged walk
(a link another user made leads only to that user's own files), a regular file only, opened
O_NOFOLLOW|O_NONBLOCK. The first read answers the file's identity; every later read of the
same copy passes it back and is refused when the file opened is not that one any more
(replaced, or rewritten in place), so one copy never mixes two files.
answer: {"data": base64 of the bytes, "length": int, "identity": [...]}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)


def main(args: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = call(
        "fileio",
        {"op": "read_range", "path": args["path"], "offset": int(args["offset"]), "length": int(args["length"]),
         "identity": args.get("identity")},
    )  # fmt: skip
    return answer
