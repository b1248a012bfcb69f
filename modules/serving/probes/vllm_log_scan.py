"""Read-only: the first line of a server log that matches one of the given patterns.

Args: ``log_path``, ``patterns`` (regexes, searched in each line), ``max_bytes`` (stop
after reading this much; default 256 MiB). The whole log is read from its start, line by
line: a crash's fatal line can be followed by hundreds of lines of shutdown noise.
Answer: ``line`` (the first match, or None), ``exists`` (the log file was there).
"""

from __future__ import annotations

import os
import re
from typing import IO, Any

DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = os.path.expanduser(args["log_path"])
    patterns = [re.compile(p) for p in args["patterns"]]
    budget = int(args.get("max_bytes") or DEFAULT_MAX_BYTES)
    try:
        with open(path, "rb") as handle:
            return {"line": _first_match(handle, patterns, budget), "exists": True}
    except FileNotFoundError:
        return {"line": None, "exists": False}


def _first_match(handle: IO[bytes], patterns: list[re.Pattern[str]], budget: int) -> str | None:
    for raw in handle:
        budget -= len(raw)
        if budget < 0:
            return None
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if any(p.search(line) for p in patterns):
            return line
    return None
