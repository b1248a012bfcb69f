"""The README's test commands work as written (issue 11): `bash scripts/test.sh tests/unit`,
the fast tier's set-up `bash scripts/setup_fast_tier.sh`,
then, with .venv activated, `python -m pytest -m "not slow" -n auto --dist loadfile` and
`bash scripts/lint.sh`.

Real: scripts/test.sh in this checkout - its venv (.venv), the setup scripts (quick when
everything is installed), the lint stage and pytest. Not run here: the whole suite
(`bash scripts/test.sh`), which is what .ci/run runs on a fresh machine. (This file is in
the slow tier, so the nested fast-tier run does not run it again.)
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


def test_the_fast_tier_and_the_lint_stage_run_in_the_activated_venv() -> None:
    """After the README's fast-tier set-up (quick here: everything is there already)."""
    readme = (REPO / "README.md").read_text()
    fast_tier = 'python -m pytest -m "not slow" -n auto --dist loadfile'
    for command in ("bash scripts/setup_fast_tier.sh", fast_tier, "bash scripts/lint.sh"):
        assert f"\n{command}" in readme, command
        done = subprocess.run(["bash", "-c", f". .venv/bin/activate && {command}"], cwd=REPO, capture_output=True,
                              text=True, timeout=3600)  # fmt: skip
        assert done.returncode == 0, f"{command}:\n{(done.stdout + done.stderr)[-4000:]}"
