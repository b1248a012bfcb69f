"""The README's test commands work as written (issues 11, 29): `bash scripts/test.sh PATH`
runs a part with only the set-up that part needs, the fast tier's set-up `bash
scripts/setup_fast_tier.sh`, then, with .venv activated, `python -m pytest -m "not slow" -n
auto --dist loadfile` and `bash scripts/lint.sh`.

Real: scripts/test.sh in this checkout - its venv (.venv), the setup scripts (quick when
everything is installed), pytest, ruff, mypy. Not run again here (issue 29: CI ran the fast
tier twice and the lint stage three times): the whole fast tier, which `bash
scripts/test.sh` has just run in this same venv with the same marker; the README's fast-tier
command runs as written with `--collect-only` added, which proves it starts in the activated
venv, loads every test module and selects the fast tier, without running it a second time.
(This file is in the slow tier, so the nested commands do not run it again.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_test_sh_runs_a_part_in_its_own_venv_with_only_its_set_up() -> None:
    done = subprocess.run(["bash", "scripts/test.sh", "tests/unit/test_yamlload.py"], cwd=REPO, capture_output=True,
                          text=True, timeout=1800)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "== set-up took" in out and "== pytest tests/unit/test_yamlload.py" in out
    assert " passed" in out and " failed" not in out
    # A unit path: no sshd, users, vLLM, hub mirror or ansible-core set-up, and no lint stage.
    assert "(steps: gpu sudo)" in out, out[-4000:]
    for other in ("setup_ssh", "setup_vllm", "setup_hub", "setup_ansible", "== lint"):
        assert other not in out, out[-4000:]
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
        as_run = f"{command} --collect-only -q" if command == fast_tier else command
        done = subprocess.run(["bash", "-c", f". .venv/bin/activate && {as_run}"], cwd=REPO, capture_output=True,
                              text=True, timeout=1800)  # fmt: skip
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{as_run}:\n{out[-4000:]}"
        if command == fast_tier:
            collected = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", out)
            assert collected and int(collected.group(1)) > 1000 and int(collected.group(3)) > 50, out[-2000:]
            assert "error" not in out.lower().splitlines()[-1], out[-2000:]
