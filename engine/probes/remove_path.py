"""Remove a file, a symlink (never its target) or a directory tree."""

from __future__ import annotations

from typing import Any

MUTATES = True

import os
import shutil


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args["path"]
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)
    return {"removed": path}
