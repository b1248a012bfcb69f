"""Two real rigger runs against the same (local) host: the second fails at once, naming
the holder; check mode takes no lock (it touches nothing). Real processes and flock; the
first run holds the lock until the test lets it finish (test_run_lock_wait.Holder)."""

from __future__ import annotations

from pathlib import Path

from test_run_lock_wait import Holder


def _quick(tmp_path: Path) -> Path:
    book = tmp_path / "quick.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: touch {tmp_path}/quick\n")
    return book


def test_second_run_on_a_locked_host_fails_fast_naming_the_holder(tmp_path, rigger):
    """Fast without a clock: the first run ends only when the test releases it, so a
    second run that waited for the lock to be free would never return; one that waited
    and gave up says so ("waiting for the run lock", "waited Ns")."""
    quick = _quick(tmp_path)
    first = Holder(tmp_path)
    try:
        second = rigger("run", str(quick), "--output", "jsonl")
        assert first.process.poll() is None, "the first run still holds the lock"
        assert second.rc == 3, second.stdout + second.stderr
        result = second.results()[0]
        assert result["status"] == "unreachable" and f"pid {first.pid}" in result["msg"]
        assert "waited" not in result["msg"] and "waiting for the run lock" not in second.stdout
        assert not (tmp_path / "quick").exists()
        assert rigger("run", str(quick), "--check").rc == 0  # check mode takes no lock
    finally:
        first.finish()
    assert first.process.returncode == 0
    assert rigger("run", str(quick)).rc == 0  # released when the first run ended
    assert (tmp_path / "quick").exists()


def test_a_killed_run_leaves_no_lock_behind(tmp_path, rigger):
    first = Holder(tmp_path)
    first.process.kill()
    first.process.wait()
    first.release.touch()  # its orphaned command (our own loop) ends by itself
    run = rigger("run", str(_quick(tmp_path)), "--output", "jsonl")
    assert run.rc == 0, run.stdout + run.stderr
