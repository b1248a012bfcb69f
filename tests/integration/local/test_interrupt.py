"""A real rigger process stopped by a signal while it runs a real long command: Ctrl-C
(SIGINT), SIGTERM and SIGHUP take one path (docs/safety.md, "Interruption")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from child_processes import STACKS_ON_ABORT, as_a_terminal_starts_it, output_of_stopped, wait_for_child
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
    proc = _rigger("run", str(tmp_path / "p.yml"), "-i", str(tmp_path / "fleet.yml"))
    sleeper = wait_for_child(psutil.Process(proc.pid), "sleep")
    time.sleep(0.3)
    sleepers = [c for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == "sleep"]
    assert len(sleepers) == 3  # forks: all three hosts run the task at once
    proc.send_signal(signal.SIGINT)
    out, err = _stopped(proc)
    assert proc.returncode == 99, out + err
    assert not any(psutil.pid_exists(s.pid) and s.status() != psutil.STATUS_ZOMBIE for s in [sleeper, *sleepers])
    assert "PLAY RECAP" in out and "interrupted during 'long'" in out
    assert "[INTERRUPTED] SIGINT: no new task started" in out and "  h1: 'long' was running" in out
    assert not (tmp_path / "never").exists()


def _rigger(*args: str, preexec_fn: Callable[[], object] = as_a_terminal_starts_it) -> subprocess.Popen[str]:
    """A real `rigger` run in its own process, under this session's run lock, that writes
    its threads' stacks if a test has to abort it."""
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **own_run_lock(), **STACKS_ON_ABORT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )


def _stopped(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """The output of a run told to stop (one that did not stop within 20 s fails the test
    with its threads' stacks, and is killed with what it started)."""
    return output_of_stopped(proc, 20)


def _started_command(pid_file: Path, timeout_s: float = 10) -> psutil.Process:
    """The process a task's command started, named by the pid it wrote (its identity is
    the pid and its start time: a reused pid is another process)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = pid_file.read_text() if pid_file.exists() else ""
        if text.endswith("\n"):
            return psutil.Process(int(text))
        time.sleep(0.02)
    raise AssertionError(f"the task's command never wrote {pid_file}")


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE  # is_running checks the start time
    except psutil.NoSuchProcess:
        return True


# Each signal with the command in the main thread (-f 1: where the signal lands), and once
# with it in a fork (a thread the signal never reaches: the stop flag ends it).
CASES = [(signal.SIGINT, 1), (signal.SIGTERM, 1), (signal.SIGHUP, 1), (signal.SIGTERM, 2)]


@pytest.mark.parametrize(("signum", "forks"), CASES, ids=[f"{s.name}-forks{f}" for s, f in CASES])
def test_every_stop_signal_takes_the_one_interrupt_path(tmp_path, rigger, signum, forks):
    """SIGINT (Ctrl-C), SIGTERM (timeout, systemd, a cancelled CI job) and SIGHUP (a closed
    terminal) alike: the command rigger started is ended, no later task starts, the recap
    and an ``interrupted`` event naming what ran are written, the exit code is 99 and the run
    lock is free at once. Real: the rigger process, its signals, the commands, the lock;
    nothing is faked."""
    (tmp_path / "two.yml").write_text(
        "all:\n  hosts:\n    h1: {ansible_connection: local}\n    h2: {ansible_connection: local}\n"
    )
    (tmp_path / "p.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: long\n"
        f"      command: sh -c 'echo $$ > {tmp_path}/{{{{ inventory_hostname }}}}.pid; exec sleep 30'\n"
        f"    - name: never\n      command: touch {tmp_path}/never\n"
    )
    proc = _rigger(
        "run", str(tmp_path / "p.yml"), "-i", str(tmp_path / "two.yml"), "-f", str(forks), "--output", "jsonl"
    )
    sleeper = _started_command(tmp_path / "h1.pid")
    proc.send_signal(signum)
    out, err = _stopped(proc)
    assert proc.returncode == 99, out + err
    assert _gone(sleeper), f"{sleeper} outlived the run"
    events = [json.loads(line) for line in out.splitlines()]
    interrupted = [e for e in events if e["event"] == "interrupted"]
    assert len(interrupted) == 1 and interrupted[0]["signal"] == signum.name, out
    assert interrupted[0]["in_flight"]["h1"] == "long"
    if forks == 1:  # h2 waited for h1: it was not running anything
        assert "h2" not in interrupted[0]["in_flight"] and not (tmp_path / "h2.pid").exists()
    assert interrupted[0]["touched"]["h1"] == ["ran sh"]  # the command had started: it may have changed h1
    recap = events[-1]
    assert recap["event"] == "recap" and recap["stopped"]["h1"] == "interrupted during 'long'"
    assert recap["hosts"]["h1"]["changed"] == 1 and recap["hosts"]["h1"]["failed"] == 0
    assert not (tmp_path / "never").exists()
    other = (tmp_path / "h2.pid").read_text().strip() if (tmp_path / "h2.pid").exists() else ""
    if other:  # with two forks h2's command may have started too (and written its pid): ended
        assert not psutil.pid_exists(int(other)) or _gone(psutil.Process(int(other)))
    quick = tmp_path / "quick.yml"
    quick.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - command: touch {tmp_path}/quick\n")
    after = rigger("run", str(quick), "--lock-wait", "0")  # the lock was released: no wait, no failure
    assert after.rc == 0, after.stdout + after.stderr


def test_a_fork_waiting_between_retries_stops_at_once(tmp_path):
    """A task in a fork (a thread: the signal never reaches it as an exception) that waits
    `delay` seconds between `until` attempts stops when the run is interrupted, not after
    the delay. Real: the rigger process, its forks, the signal."""
    (tmp_path / "two.yml").write_text(
        "all:\n  hosts:\n    h1: {ansible_connection: local}\n    h2: {ansible_connection: local}\n"
    )
    (tmp_path / "p.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: retried\n"
        f"      command: sh -c 'echo $$ > {tmp_path}/{{{{ inventory_hostname }}}}.pid; exit 1'\n"
        "      register: result\n      until: result.rc == 0\n      retries: 3\n      delay: 60\n"
    )
    proc = _rigger("run", str(tmp_path / "p.yml"), "-i", str(tmp_path / "two.yml"))
    deadline = time.monotonic() + 20
    while not all((tmp_path / f"{h}.pid").exists() for h in ("h1", "h2")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # both forks are in their delay now
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()  # only if it is still waiting (the failure): it is gone otherwise
    assert proc.returncode == 99, out + err
    assert time.monotonic() - started < 5, "the run waited out the retry delay"
    assert "interrupted during 'retried'" in out, out


def test_a_signal_ignored_at_start_stays_ignored(tmp_path):
    """`nohup rigger run ...` (SIGHUP ignored when rigger starts) goes on when the terminal
    closes; SIGTERM still stops it. Real: the process, its inherited signal disposition."""
    (tmp_path / "p.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - name: long\n      command: sh -c 'echo $$ > {tmp_path}/localhost.pid; exec sleep 30'\n"
    )
    proc = _rigger(
        "run",
        str(tmp_path / "p.yml"),
        "--output",
        "jsonl",
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # what nohup does
    )
    sleeper = _started_command(tmp_path / "localhost.pid")
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    assert proc.poll() is None and not _gone(sleeper), "SIGHUP stopped a run started with it ignored"
    proc.send_signal(signal.SIGTERM)
    out, err = _stopped(proc)
    assert proc.returncode == 99, out + err
    assert [json.loads(line)["signal"] for line in out.splitlines() if '"interrupted"' in line] == ["SIGTERM"]
    assert _gone(sleeper)


@pytest.mark.parametrize("wait", ["timeout: 300", "port: 9, state: started, delay: 300"], ids=["pause", "delay"])
def test_a_module_waiting_on_one_host_stops_at_once(tmp_path, wait):
    """wait_for on one host (a task runs in a fork there too, where the signal never lands):
    its waits read the run's stop flag, so SIGTERM ends a 300 s wait at once. Real: the
    rigger process, the module's wait, the signal."""
    (tmp_path / "p.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f"    - command: touch {tmp_path}/started\n"
        f"    - name: waits\n      wait_for: {{{wait}}}\n"
    )
    proc = _rigger("run", str(tmp_path / "p.yml"), "--output", "jsonl")
    deadline = time.monotonic() + 20
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # in the wait now
    proc.send_signal(signal.SIGTERM)
    out, err = output_of_stopped(proc, 10)
    assert proc.returncode == 99, out + err
    assert json.loads(out.splitlines()[-1])["stopped"]["localhost"] == "interrupted during 'waits'", out
