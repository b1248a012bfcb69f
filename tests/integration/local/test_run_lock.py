"""Two real rigger runs against the same (local) host: the second fails at once, naming
the holder; check mode takes no lock (it touches nothing). Real processes and flock."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from isolated_home import own_run_lock

REPO = Path(__file__).resolve().parents[3]


def _start(book: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(book), *extra],
        env={**os.environ, "PYTHONPATH": str(REPO), **own_run_lock()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_second_run_on_a_locked_host_fails_fast_naming_the_holder(tmp_path, rigger):
    started = tmp_path / "started"
    slow = tmp_path / "slow.yml"
    slow.write_text(
        f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: sh -c 'touch {started}; sleep 6'\n"
    )
    quick = tmp_path / "quick.yml"
    quick.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: touch {tmp_path}/quick\n")
    first = _start(slow)
    try:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), first.stderr.read() if first.stderr else ""
        t0 = time.monotonic()
        second = rigger("run", str(quick), "--output", "jsonl")
        assert time.monotonic() - t0 < 5
        assert second.rc == 3, second.stdout + second.stderr
        result = second.results()[0]
        assert result["status"] == "unreachable" and f"pid {first.pid}" in result["msg"]
        assert not (tmp_path / "quick").exists()
        assert rigger("run", str(quick), "--check").rc == 0  # check mode takes no lock
    finally:
        first.wait(timeout=30)
    assert first.returncode == 0
    assert rigger("run", str(quick)).rc == 0  # released when the first run ended
    assert (tmp_path / "quick").exists()


def test_a_killed_run_leaves_no_lock_behind(tmp_path, rigger):
    started = tmp_path / "started"
    slow = tmp_path / "slow.yml"
    slow.write_text(
        f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: sh -c 'touch {started}; sleep 60'\n"
    )
    first = _start(slow)
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill()
    first.wait()
    quick = tmp_path / "quick.yml"
    quick.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: {msg: hi}\n")
    run = rigger("run", str(quick), "--output", "jsonl")
    assert run.rc == 0, run.stdout + run.stderr
    subprocess.run(["pkill", "-f", f"sh -c touch {started}"], check=False)
