"""This test session's own run-lock directory: the one place tests keep their rigger runs
apart from a user's or another test session's on this machine.

engine/runlock keeps the lock under ``$RIGGER_STATE_DIR`` when it is set (one file per
login user, so the SSH lab's users lock there too: the directory is world-writable and
sticky). conftest puts it in this session's environment at start and removes it at the
end; ``own_run_lock()`` is the entry for an environment a test builds itself. HOME is left
alone: the lock no longer lives under it.

Each directory made is recorded in this checkout's ``.cache/rigger-test-dirs`` when it is
made, so scripts/clean.sh removes this checkout's leftovers (a session killed before its
end) and never another checkout's or another user's.
"""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path

STATE_DIR_ENV = "RIGGER_STATE_DIR"  # engine/runlock: where the run lock lives on each host
# scripts/clean.sh reads this record (one path a line) and removes what it lists
MADE_RECORD = Path(__file__).resolve().parents[2] / ".cache" / "rigger-test-dirs"


@cache
def _session_state_dir() -> str:
    state_dir = tempfile.mkdtemp(prefix="rigger-test-state-")
    os.chmod(state_dir, 0o1777)
    MADE_RECORD.parent.mkdir(exist_ok=True)
    with open(MADE_RECORD, "a") as record:  # O_APPEND: xdist workers record side by side
        record.write(state_dir + "\n")
    return state_dir


def own_run_lock() -> dict[str, str]:
    """Environment entries that make a rigger run lock hosts under this session's directory."""
    return {STATE_DIR_ENV: _session_state_dir()}
