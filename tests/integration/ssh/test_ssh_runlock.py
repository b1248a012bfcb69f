"""The per-host run lock over real SSH: concurrent runs, clean release, dead runs.

Real: sshd, the holder process on the host, flock(2) on the host's lock file, a second
controller process killed with SIGKILL. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sshlab import Lab

from engine import runlock
from engine.connection.base import ScopedConnection
from engine.errors import HostUnreachable

pytestmark = pytest.mark.slow
LOCK_FILE = Path("/home/rigger-ssh/.cache/rigger/run.lock")
OTHER_RUN = "another-controller-run"  # as a second rigger process would present itself


def test_second_run_fails_at_once_naming_the_holder(lab: Lab) -> None:
    first, second = lab.connect("gpu1"), lab.connect("gpu1")
    handle = runlock.acquire(ScopedConnection(first), "alice: site.yml")
    try:
        record = json.loads(LOCK_FILE.read_text())
        assert record["owner"] == "alice: site.yml"
        assert record["controller_pid"] == os.getpid()
        assert record["holder_pid"] > 0 and record["started_at"]
        started = time.monotonic()
        with pytest.raises(runlock.RunLocked) as caught:
            runlock.acquire(second, "bob: site.yml", run_id=OTHER_RUN)
        assert time.monotonic() - started < 3
        message = str(caught.value)
        assert message.startswith("gpu1: another rigger run holds the run lock")
        assert "alice: site.yml" in message and f"pid {os.getpid()}" in message
        assert isinstance(caught.value, HostUnreachable)
    finally:
        runlock.release(handle)
        first.close()
    assert LOCK_FILE.read_text() == "", "a clean release leaves no record"
    again = runlock.acquire(second, "bob: site.yml")
    assert again.warning is None
    runlock.release(again)
    runlock.release(again)  # twice is harmless
    second.close()


def test_lock_of_a_killed_controller_is_taken_over_with_a_warning(lab: Lab, tmp_path: Path) -> None:
    script = tmp_path / "holder.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from sshlab import host_vars, Sshd
            from engine.connection.ssh.connection import SSHConnection
            from engine import runlock
            conn = SSHConnection.from_host_vars("gpu1", {lab.vars()!r})
            runlock.acquire(conn, "doomed run")
            print("locked", flush=True)
            time.sleep(300)
            """
        )
    )
    doomed = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, cwd=Path.cwd(), text=True)
    try:
        assert doomed.stdout is not None and doomed.stdout.readline() == "locked\n"
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    finally:
        if doomed.poll() is None:
            doomed.kill()
    conn = lab.connect("gpu1")
    try:
        handle = _acquire_eventually(conn, "next run")
        assert handle.warning is not None
        assert "took over the run lock" in handle.warning and "doomed run" in handle.warning
        runlock.release(handle)
    finally:
        conn.close()


def test_lock_whose_holder_process_died_is_taken_over(lab: Lab) -> None:
    first, second = lab.connect("gpu1"), lab.connect("gpu1")
    try:
        handle = runlock.acquire(first, "run with a killed holder")
        os.kill(handle.record["holder_pid"], signal.SIGKILL)
        taken = _acquire_eventually(second, "successor")
        assert taken.warning and "run with a killed holder" in taken.warning
        time.sleep(0.2)
        with pytest.raises(HostUnreachable, match="no longer locked"):
            first.run(["true"])  # the run that lost its lock must not go on silently
        runlock.release(taken)
        runlock.release(handle)
    finally:
        first.close()
        second.close()


def test_heartbeat_keeps_a_short_stale_window_alive(lab: Lab) -> None:
    first, second = lab.connect("gpu1"), lab.connect("gpu1")
    try:
        handle = runlock.acquire(first, "long run", stale_after_s=0.8)
        time.sleep(2.0)
        with pytest.raises(runlock.RunLocked, match="long run"):
            runlock.acquire(second, "impatient run", run_id=OTHER_RUN)
        runlock.release(handle)
    finally:
        first.close()
        second.close()


def _acquire_eventually(conn, owner: str, run_id: str = runlock.RUN_ID) -> runlock.LockHandle:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 10
    while True:
        try:
            return runlock.acquire(conn, owner, run_id=run_id)
        except runlock.RunLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_this_run_reaching_one_machine_under_two_names_shares_its_lock(lab: Lab) -> None:
    first, alias = lab.connect("gpu1"), lab.connect("gpu1-alias")
    try:
        handle = runlock.acquire(first, "one run")
        shared = runlock.acquire(alias, "one run")
        assert shared.shared and shared.warning is None
        runlock.release(shared)
        with pytest.raises(runlock.RunLocked, match="one run"):
            runlock.acquire(alias, "another run", run_id=OTHER_RUN)
        runlock.release(handle)
        runlock.release(runlock.acquire(alias, "another run", run_id=OTHER_RUN))
    finally:
        first.close()
        alias.close()


def test_lock_is_dropped_when_the_controller_goes_silent(lab: Lab) -> None:
    """The controller stops its heartbeat (as a frozen or cut-off controller would): the
    host side gives the lock up after stale_after_s, leaving the record for a takeover."""
    first, second = lab.connect("gpu1"), lab.connect("gpu1")
    try:
        handle = runlock.acquire(first, "frozen run", stale_after_s=1.0)
        handle._stop.set()  # heartbeat thread ends; the connection itself stays open
        taken = _acquire_eventually(second, "next run", run_id=OTHER_RUN)
        assert taken.warning and "frozen run" in taken.warning
        runlock.release(taken)
    finally:
        first.close()
        second.close()


def test_a_holder_that_cannot_start_says_why(lab: Lab) -> None:
    """A host whose python cannot run: the failure names the host's own error, not a
    closed socket (real sshd; the interpreter path simply does not exist there)."""
    conn = lab.connect("gpu1", ansible_python_interpreter="/nonexistent/python3", ssh_remote_python=False)
    try:
        with pytest.raises(HostUnreachable) as caught:
            runlock.acquire(conn, "alice: site.yml")
        message = str(caught.value)
        assert message.startswith("gpu1: ")
        assert "/nonexistent/python3" in message or "not found" in message, message
    finally:
        conn.close()
