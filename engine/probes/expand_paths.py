"""``~`` and ``$VAR`` in path arguments, expanded on the host as Ansible's modules expand a
``type='path'`` argument (``os.path.expanduser(os.path.expandvars(path))``), as the user
the task runs as. Read-only."""

from __future__ import annotations

import os
from typing import Any


def main(args: dict[str, Any]) -> dict[str, Any]:
    return {"paths": [os.path.expanduser(os.path.expandvars(str(path))) for path in args["paths"]]}
