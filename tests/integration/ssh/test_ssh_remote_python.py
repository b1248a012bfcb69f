"""The persistent remote interpreter: one per host, restarted when it dies, and a clean
fallback to exec channels on a host without a usable python.

Real: sshd, the remote python process on the host (found and killed with real signals), the
host's python3. Nothing is mocked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

import pytest
from sshlab import Lab

from engine.probes import ProbeError

pytestmark = pytest.mark.slow


def _remote_python_pids(user: str) -> set[int]:
    pgrep = ["pgrep", "-u", user, "-f", "rigger-remote-python"]
    found = subprocess.run(pgrep, capture_output=True, text=True).stdout.split()
    return {int(pid) for pid in found}


def test_one_remote_python_serves_every_command_and_probe_of_a_host(lab: Lab) -> None:
    before = _remote_python_pids("rigger-ssh")
    connection = lab.connect()
    try:
        for _ in range(10):
            connection.run(["true"])
        connection.run_probe("host", {})
        started = _remote_python_pids("rigger-ssh") - before
        assert len(started) == 1, started
    finally:
        connection.close()
    deadline = time.monotonic() + 5
    while _remote_python_pids("rigger-ssh") & started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _remote_python_pids("rigger-ssh") & started, "the remote python outlived its connection"


def test_remote_python_killed_between_tasks_is_replaced(lab: Lab) -> None:
    before = _remote_python_pids("rigger-ssh")
    connection = lab.connect()
    try:
        assert connection.run(["echo", "one"]).stdout == "one\n"
        (first,) = _remote_python_pids("rigger-ssh") - before
        os.kill(first, signal.SIGKILL)
        time.sleep(0.2)
        assert connection.run(["echo", "two"]).stdout == "two\n"
        assert connection.run_probe("host", {})["user"] == "rigger-ssh"
    finally:
        connection.close()


def test_remote_python_stops_the_commands_it_started_when_the_connection_closes(lab: Lab) -> None:
    connection = lab.connect()
    marker = f"rigger-orphan-{os.getpid()}"
    connection.run(["true"])
    worker = threading.Thread(
        target=lambda: _ignore(lambda: connection.run(["sh", "-c", f"sleep 30 # {marker}"])),
        daemon=True,
    )
    worker.start()
    time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
    connection.close()
    deadline = time.monotonic() + 5
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "a command outlived the closed connection"
        time.sleep(0.05)


def _ignore(call) -> None:  # type: ignore[no-untyped-def]
    with contextlib.suppress(Exception):
        call()


def test_host_without_that_python_falls_back_to_exec_channels(lab: Lab) -> None:
    connection = lab.connect(ansible_python_interpreter="/opt/no/python9")
    try:
        assert connection.run(["echo", "still works"]).stdout == "still works\n"
        with pytest.raises(ProbeError, match="/opt/no/python9"):
            connection.run_probe("host", {})
    finally:
        connection.close()
