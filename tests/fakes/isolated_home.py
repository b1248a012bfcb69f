"""A home of this test session's own for the rigger CLI runs it starts.

The local run lock lives in ``~/.cache/rigger/run.lock``: any other rigger run on this
machine (another checkout's tests, a demo) would make a test's run fail with RunLocked.
CLI runs started by the tests get this session's home instead (the tests that check the
lock still share it with each other); tool caches stay where they were (XDG_CACHE_HOME).
"""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path


@cache
def _session_home() -> str:
    return tempfile.mkdtemp(prefix="rigger-test-home-")


def own_run_lock() -> dict[str, str]:
    """Environment entries that give a CLI run this session's home."""
    caches = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return {"HOME": _session_home(), "XDG_CACHE_HOME": caches}
