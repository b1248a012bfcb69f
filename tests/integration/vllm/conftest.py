"""Fixtures for the real-vLLM tests (helpers live in vllmkit.py).

Real: vLLM CPU (`.venv-vllm`), the tiny model made by scripts/make_tiny_model.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllmkit import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-master") / "tiny-llama")


@pytest.fixture(scope="module")
def tiny_model(tiny_model_master: Path) -> Iterator[Path]:
    """A private copy per test module (tests patch its config), readable by any user."""
    root = Path(os.environ.get("RIGGER_TEST_TMP", "/tmp"))
    work = Path(subprocess.check_output(["mktemp", "-d", str(root / "rigger-vllm-XXXXXX")], text=True).strip())
    work.chmod(0o755)
    copy = work / "tiny-llama"
    shutil.copytree(tiny_model_master, copy)
    try:
        yield copy
    finally:
        shutil.rmtree(work, ignore_errors=True)
