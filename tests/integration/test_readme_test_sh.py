"""The README's `bash scripts/test.sh tests/unit` works as written (issue 11).

Real: scripts/test.sh in this checkout - its venv (.venv), the setup scripts (quick when
everything is installed), ruff, mypy and pytest over tests/unit. Not run here: the whole
suite (`bash scripts/test.sh`), which is what .ci/run runs on a fresh machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_test_sh_runs_a_part_in_its_own_venv() -> None:
    done = subprocess.run(["bash", "scripts/test.sh", "tests/unit"], cwd=REPO, capture_output=True, text=True,
                          timeout=1800)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "== set-up took" in out and "== lint" in out and "== pytest" in out
    assert " passed" in out and " failed" not in out
    # Its python is the checkout's venv, not the interpreter that runs this test.
    venv_python = REPO / ".venv" / "bin" / "python"
    assert venv_python.exists()
    prefix = subprocess.run([str(venv_python), "-c", "import sys; print(sys.prefix)"], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    assert Path(prefix) == REPO / ".venv" and prefix != sys.base_prefix
