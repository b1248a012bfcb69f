"""`rigger run` with ensure_model against the olah mirror: check, download, offline re-run.

Real: the CLI in a subprocess, olah on loopback, huggingface_hub, the filesystem.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from olah_mirror import REPO_ID, OlahMirror, repo_files

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]

PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
  - name: weights
    ensure_model:
      repo_id: {repo}
      revision: {commit}
      local_dir: {local_dir}
      python: {python}
      reserve_free_mib: 1
    register: model
"""


def rigger(playbook: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", str(playbook), "--output", "jsonl", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "HF_TOKEN": "hf_cli_secret_token"},
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert "hf_cli_secret_token" not in done.stdout + done.stderr
    return done.returncode, events


def test_check_then_download_then_ok_with_mirror_stopped(tmp_path: Path, mirror: OlahMirror) -> None:
    local_dir = tmp_path / "tiny"
    playbook = tmp_path / "model.yml"
    playbook.write_text(PLAYBOOK.format(repo=REPO_ID, commit=mirror.commit, local_dir=local_dir, python=sys.executable))
    rc, events = rigger(playbook, "--check")
    task = next(e for e in events if e.get("event") == "task_result")
    assert rc == 0 and task["status"] == "changed"
    assert task["msg"].startswith("would download 5 of 5 files")
    assert not local_dir.exists()

    rc, events = rigger(playbook)
    assert rc == 0 and events[-1]["hosts"]["localhost"]["changed"] == 1
    assert all((local_dir / n).read_bytes() == d for n, d in repo_files().items())

    mirror.stop()
    try:
        rc, events = rigger(playbook)
    finally:
        mirror.start()
    task = next(e for e in events if e.get("event") == "task_result")
    assert rc == 0 and task["status"] == "ok" and "verified (size)" in task["msg"]
    assert events[-1]["hosts"]["localhost"]["changed"] == 0
