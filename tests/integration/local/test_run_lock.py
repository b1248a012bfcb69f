"""Two real rigger runs against the same (local) host: the second fails at once, naming
the holder; check mode takes no lock (it touches nothing). Real flock; the first run is a
process of its own that holds the lock until the test lets it finish (test_run_lock_wait.
Holder), the second the CLI in the test process (another controller all the same)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_run_lock_wait import Holder

from engine import runlock


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


# A holder whose controller is already dead, as a killed run's holder is between its
# controller's death and its own exit (it exits once it reads EOF): it takes the real flock,
# writes the record a holder writes, and lets go only some time later, widening that window
# far beyond what any run needs to reach the lock. (How long it lingers decides nothing on
# correct code, which waits for its exit; on the old code a run reaching the lock inside
# the window failed, one fast-tier run in three.)
DYING_HOLDER = """
import fcntl, json, os, socket, sys, time
path, dead_pid = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.dirname(path), exist_ok=True)
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
record = {"owner": "a killed run", "controller_host": socket.gethostname(), "controller_pid": dead_pid,
          "holder_pid": os.getpid(), "run_id": "killed", "user": "root", "host": socket.gethostname()}
os.write(fd, json.dumps(record).encode() + b"\\n")
print("held", flush=True)
time.sleep(3)
"""


def test_a_run_started_while_a_killed_runs_holder_is_exiting_gets_the_lock(tmp_path, rigger):
    """Issue 24: the cause of the intermittent failure above. Real: flock(2), the CLI, the
    holder program; the dying holder is a stand-in that holds the real lock file with a
    record naming a controller pid of this machine that is gone (a process that exited)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    path = runlock.lock_path().replace("{uid}", str(os.getuid()))
    dying = subprocess.Popen(
        [sys.executable, "-c", DYING_HOLDER, path, str(gone.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert dying.stdout is not None and dying.stdout.readline().strip() == "held"
        run = rigger("run", str(_quick(tmp_path)), "--output", "jsonl")
        assert run.rc == 0, run.stdout + run.stderr
        assert (tmp_path / "quick").exists()
    finally:
        dying.kill()
        dying.wait()


def test_a_fifo_at_the_run_lock_path_fails_the_host_at_once_naming_it(tmp_path, rigger):
    """Before the one state-file primitive a FIFO planted at the lock's path hung the run
    in open(2) (an ``unexpected error`` at best). Now the host fails at once as
    unreachable, naming the FIFO; nothing ran. Real: the CLI, a real FIFO, real flock."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.mkfifo(state / f"run-{os.getuid()}.lock")
    quick = _quick(tmp_path)
    result = rigger("run", str(quick), env={runlock.STATE_DIR_ENV: str(state)}, timeout_s=60)
    assert result.rc == 3, result.stdout + result.stderr
    assert "FIFO" in result.stdout + result.stderr and "a bug" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "quick").exists()
