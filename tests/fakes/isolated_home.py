"""This test session's own run-lock directory: the one place tests keep their rigger runs
apart from a user's or another test session's on this machine.

engine/runlock keeps the lock under ``$RIGGER_STATE_DIR`` when it is set (one file per
login user, so the SSH lab's users lock there too: the directory is world-writable and
sticky). conftest puts it in this session's environment at start and removes it at the
end; ``own_run_lock()`` is the entry for an environment a test builds itself. HOME is left
alone: the lock no longer lives under it.
"""

from __future__ import annotations

import os
import tempfile
from functools import cache

STATE_DIR_ENV = "RIGGER_STATE_DIR"  # engine/runlock: where the run lock lives on each host


@cache
def _session_state_dir() -> str:
    state_dir = tempfile.mkdtemp(prefix="rigger-test-state-")
    os.chmod(state_dir, 0o1777)
    return state_dir


def own_run_lock() -> dict[str, str]:
    """Environment entries that make a rigger run lock hosts under this session's directory."""
    return {STATE_DIR_ENV: _session_state_dir()}
