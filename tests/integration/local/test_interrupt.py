"""Ctrl-C on a real rigger process running a real long command (SIGINT, as a terminal sends)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from child_processes import wait_for_child
from isolated_home import own_run_lock

REPO = Path(__file__).resolve().parents[3]


def test_ctrl_c_ends_running_commands_reports_and_exits_99(tmp_path):
    hosts = "\n".join(f"    h{i}: {{ansible_connection: local}}" for i in range(1, 4))
    (tmp_path / "fleet.yml").write_text("all:\n  hosts:\n" + hosts + "\n")
    (tmp_path / "p.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: long\n      command: sleep 300\n"
        f"    - name: never\n      command: touch {tmp_path}/never\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(tmp_path / "p.yml"), "-i", str(tmp_path / "fleet.yml")],
        env={**os.environ, "PYTHONPATH": str(REPO), **own_run_lock()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sleeper = wait_for_child(psutil.Process(proc.pid), "sleep")
    time.sleep(0.3)
    sleepers = [c for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == "sleep"]
    assert len(sleepers) == 3  # forks: all three hosts run the task at once
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 99, out + err
    assert not any(psutil.pid_exists(s.pid) and s.status() != psutil.STATUS_ZOMBIE for s in [sleeper, *sleepers])
    assert "PLAY RECAP" in out and "interrupted during 'long'" in out
    assert not (tmp_path / "never").exists()
