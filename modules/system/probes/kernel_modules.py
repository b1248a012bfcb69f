"""Read-only: is a kernel module loaded (or built in), and the modules-load.d / modprobe.d files.

Args: ``name``, ``load_dir`` and ``options_dir`` (the two configuration directories).
Answer: ``loaded`` (a line of /proc/modules names it, ``-`` read as ``_``, or
modules.builtin of the running kernel lists ``NAME.ko``), ``load_files`` and
``options_files`` (path -> text of each regular file directly in those directories,
read through the file primitive; a missing directory has none).
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)
# /proc files report size 0 and some kernels refuse a huge read(): ask for what fits
MAX_LIST_BYTES = 4 << 20


def _text(path: str) -> str | None:
    answer = call("fileio", {"op": "read", "path": path, "max_bytes": MAX_LIST_BYTES})
    return base64.b64decode(answer["data"]).decode("utf-8", "replace") if answer["exists"] else None


def _loaded(name: str) -> bool:
    proc = _text("/proc/modules") or ""
    wanted = name.replace("-", "_") + " "
    if any(line.startswith(wanted) for line in proc.splitlines()):
        return True
    builtin = _text(f"/lib/modules/{os.uname().release}/modules.builtin") or ""
    return any(line.rstrip().endswith(f"/{name}.ko") for line in builtin.splitlines())


def _files(directory: str) -> dict[str, str]:
    try:
        entries = call("fileio", {"op": "list", "path": directory})["entries"]
    except FileNotFoundError:
        return {}
    found = {}
    for rel, kind, _mode, _size in entries:
        if kind in ("file", "link") and "/" not in rel:  # a link: read as the file primitive judges it
            text = _text(f"{directory}/{rel}")
            if text is not None:
                found[f"{directory}/{rel}"] = text
    return found


def main(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "loaded": _loaded(args["name"]),
        "load_files": _files(args["load_dir"]),
        "options_files": _files(args["options_dir"]),
    }
