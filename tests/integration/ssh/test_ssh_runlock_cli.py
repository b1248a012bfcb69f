"""Two real `rigger run` processes against the same SSH host: the second is refused at
once, naming the first (needs the runner to call engine.runlock; see the SSH report).

Real: two CLI processes, sshd, the run-lock holder on the host."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sshlab import Lab
from test_ssh_playbooks import inventory, write

pytestmark = pytest.mark.slow


def test_second_concurrent_run_is_refused_naming_the_first(rigger, lab: Lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv = inventory(lab, tmp_path / "hosts.yml")
    slow = write(tmp_path / "slow.yml", "- hosts: gpu1\n  gather_facts: false\n  tasks:\n    - command: sleep 5\n")
    quick = write(tmp_path / "quick.yml", "- hosts: gpu1\n  gather_facts: false\n  tasks:\n    - command: 'true'\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    first = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(slow), "-i", str(inv)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(2)
        started = time.monotonic()
        second = rigger("run", str(quick), "-i", str(inv), "--output", "jsonl")
        assert time.monotonic() - started < 5
        assert second.rc == 3, second.stdout[-2000:]
        messages = " ".join(r.get("msg", "") for r in second.results())
        assert "another rigger run holds the run lock" in messages and "slow.yml" in messages
    finally:
        out, _ = first.communicate(timeout=30)
    assert first.returncode == 0, out[-2000:]
    third = rigger("run", str(quick), "-i", str(inv), "--output", "jsonl")
    assert third.rc == 0, "the lock must be released when the first run ends"
