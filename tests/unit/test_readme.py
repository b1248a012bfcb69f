"""The README's module reference is generated from the schemas and must be current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_module_reference_is_current():
    proc = subprocess.run(
        [sys.executable, "scripts/gen_module_docs.py", "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def test_readme_gives_the_two_commands():
    text = (REPO / "README.md").read_text()
    assert "./scripts/demo.sh" in text and "bash scripts/test.sh" in text
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()
