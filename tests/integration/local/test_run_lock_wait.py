"""The run lock can wait, can be turned off from -e, and tests keep their locks apart.

Real: two rigger CLI processes against the local host, the real lock file and flock(2);
the first run holds the lock until the test lets it finish (it waits for a file).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_processes import output_of_stopped

REPO = Path(__file__).resolve().parents[3]


def rigger_process(book: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(book), *extra],
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), process.stdout.read() if process.poll() is not None and process.stdout else "no start"


class Holder:
    """A real rigger run that holds the local run lock until ``finish()``."""

    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None):
        self.started, self.release = tmp_path / "started", tmp_path / "release"
        book = tmp_path / "hold.yml"
        book.write_text(
            "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
            f"    - command: sh -c 'touch {self.started}; while [ ! -e {self.release} ]; do sleep 0.1; done'\n"
        )
        self.process = rigger_process(book, env=env)
        wait_for(self.started, self.process)

    @property
    def pid(self) -> int:
        return self.process.pid

    def finish(self) -> None:
        self.release.touch()
        self.process.wait(timeout=60)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    held = Holder(tmp_path)
    try:
        yield held
    finally:
        held.finish()


@pytest.fixture
def quick(tmp_path: Path) -> Path:
    book = tmp_path / "quick.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: touch {tmp_path}/ran\n")
    return book


@pytest.mark.parametrize("wait", [["--lock-wait", "300"], ["-e", "rigger_run_lock_wait_s=300"]], ids=["option", "var"])
def test_a_waiting_run_says_who_holds_the_lock_and_runs_once_it_is_free(
    holder: Holder, quick: Path, tmp_path: Path, wait: list[str]
) -> None:
    waiting = rigger_process(quick, *wait)
    assert waiting.stdout is not None
    line = waiting.stdout.readline()
    while line and "waiting for the run lock" not in line:
        line = waiting.stdout.readline()
    assert f"pid {holder.pid}" in line and "hold.yml" in line, line
    assert not (tmp_path / "ran").exists(), "it waited: nothing ran while the lock was held"
    holder.finish()
    rest = waiting.stdout.read()
    assert waiting.wait(timeout=120) == 0, rest
    assert (tmp_path / "ran").exists()


def test_a_run_waiting_for_the_lock_stops_at_once_when_interrupted(holder: Holder, quick: Path, tmp_path: Path) -> None:
    """The wait runs in a fork (where no signal lands): the run's stop flag ends it, not the
    300 s it was allowed. Real: both rigger processes, the lock, the signal."""
    waiting = rigger_process(quick, "--lock-wait", "300")
    assert waiting.stdout is not None
    line = waiting.stdout.readline()
    while line and "waiting for the run lock" not in line:
        line = waiting.stdout.readline()
    assert "waiting for the run lock" in line, line
    waiting.send_signal(signal.SIGTERM)
    out, _ = output_of_stopped(waiting, 20)
    assert waiting.returncode == 99, out
    assert not (tmp_path / "ran").exists()


def test_a_wait_that_runs_out_is_unreachable_naming_the_holder(holder: Holder, quick: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    run = rigger("run", str(quick), "--lock-wait", "1", "--output", "jsonl")
    assert run.rc == 3, run.stdout + run.stderr
    message = run.results()[0]["msg"]
    assert f"pid {holder.pid}" in message and "waited" in message and "1s" in message


def test_rigger_run_lock_false_from_extra_vars_turns_the_lock_off(holder: Holder, quick: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    run = rigger("run", str(quick), "-e", "rigger_run_lock=false")
    assert run.rc == 0, run.stdout + run.stderr


def test_a_wait_that_is_not_a_number_is_a_clear_error(quick: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    run = rigger("run", str(quick), "-e", "rigger_run_lock_wait_s=soon", "--output", "jsonl")
    assert run.rc != 0 and "rigger_run_lock_wait_s" in run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    bad = rigger("run", str(quick), "--lock-wait", "-1")
    assert bad.rc == 5 and "--lock-wait" in bad.stderr


def test_a_delegated_host_with_a_wait_that_is_not_a_number_fails_naming_it(tmp_path: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    """delegate_to reaches h2 with h2's own variables: its bad wait fails the task as it
    would fail h2 itself (it was read as 0 there, and the task ran)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    h1: {ansible_connection: local}\n"
        "    h2: {ansible_connection: local, rigger_run_lock_wait_s: soon}\n"
    )
    book = tmp_path / "delegate.yml"
    book.write_text(
        f"- hosts: h1\n  gather_facts: false\n  tasks:\n    - command: touch {tmp_path}/ran\n      delegate_to: h2\n"
    )
    run = rigger("run", str(book), "-i", str(inventory), "--output", "jsonl")
    assert run.rc == 2, run.stdout + run.stderr
    message = run.results()[0]["msg"]
    assert "h2" in message and "rigger_run_lock_wait_s" in message and "'soon'" in message, message
    assert not (tmp_path / "ran").exists()


def test_test_runs_lock_under_their_own_state_dir_not_the_users(tmp_path: Path, quick: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    """conftest gives each test run a RIGGER_STATE_DIR: a user's own run (default lock
    path under their HOME) and the test's run do not see each other's lock."""
    state_dir = os.environ.get("RIGGER_STATE_DIR")
    assert state_dir and Path(state_dir).is_dir()
    home = tmp_path / "home"
    home.mkdir()
    users_run = {"HOME": str(home), "RIGGER_STATE_DIR": ""}
    user = Holder(tmp_path, env=users_run)
    try:
        assert (home / ".cache" / "rigger" / "run.lock").exists()
        beside = rigger("run", str(quick))
        assert beside.rc == 0, beside.stdout + beside.stderr
        assert list(Path(state_dir).glob("run-*.lock")), "the test's run locked under RIGGER_STATE_DIR"
        same_place = rigger("run", str(quick), env=users_run)
        assert same_place.rc == 3 and f"pid {user.pid}" in same_place.stdout
    finally:
        user.finish()


def test_apply_waits_for_the_lock_as_run_does(holder: Holder, quick: Path, tmp_path: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    """`rigger apply --lock-wait`: the same wait as `rigger run --lock-wait`, here one that
    runs out while the holder keeps the lock: the host is unreachable, naming the holder,
    and nothing of the plan is applied."""
    planned = rigger("plan", str(quick), "-o", str(tmp_path / "plan.json"))
    assert planned.rc == 0, planned.stdout + planned.stderr
    done = rigger("apply", str(tmp_path / "plan.json"), "--lock-wait", "1", "--output", "jsonl")
    assert done.rc == 3, done.stdout + done.stderr
    message = done.results()[0]["msg"]
    assert f"pid {holder.pid}" in message and "waited" in message and "1s" in message, message
    assert not (tmp_path / "ran").exists()
