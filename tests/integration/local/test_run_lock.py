"""Two real rigger runs against the same (local) host: the second fails at once, naming
the holder; check mode takes no lock (it touches nothing). Real flock; the first run is a
process of its own, the second the CLI in the test process (another controller all the same)."""

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
    """The first run holds the lock until the test lets it finish: the second ran and
    failed while the first still held it, so it did not wait (no clock involved)."""
    started, release = tmp_path / "started", tmp_path / "release"
    slow = tmp_path / "slow.yml"
    slow.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - command: sh -c 'touch {started}; while [ ! -e {release} ]; do sleep 0.05; done'\n"
    )
    quick = tmp_path / "quick.yml"
    quick.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: touch {tmp_path}/quick\n")
    first = _start(slow)
    try:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), first.stderr.read() if first.stderr else ""
        second = rigger("run", str(quick), "--output", "jsonl", timeout_s=60)
        assert first.poll() is None, "the first run still holds the lock: the second did not wait for it"
        assert second.rc == 3, second.stdout + second.stderr
        result = second.results()[0]
        assert result["status"] == "unreachable" and f"pid {first.pid}" in result["msg"]
        assert "waited" not in result["msg"], "without --lock-wait a run does not wait"
        assert not (tmp_path / "quick").exists()
        assert rigger("run", str(quick), "--check").rc == 0  # check mode takes no lock
    finally:
        release.touch()
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
