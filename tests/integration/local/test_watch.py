"""``rigger watch`` on the local connection: real files, the real CLI (in this process, or a
process of its own where signals are sent), the real run lock, a real HTTP metrics
endpoint. Nothing is faked; the "hosts" are inventory names on the local connection."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from child_processes import wait_for_child
from isolated_home import own_run_lock

REPO = Path(__file__).resolve().parents[3]
HOST = "{{ inventory_hostname }}"


def _playbook(tmp: Path, heal: str = "[write_file]", extra_task: str = "") -> Path:
    (tmp / "data").mkdir(exist_ok=True)
    book = tmp / "site.yml"
    book.write_text(
        "- hosts: all\n  gather_facts: false\n"
        f"  vars:\n    rigger_watch_heal: {heal}\n"
        "  tasks:\n"
        "    - name: healed\n"
        f"      write_file: {{path: '{tmp}/data/{HOST}.txt', content: \"ok\\n\", backup: false}}\n"
        f"{extra_task}"
    )
    return book


def _inventory(tmp: Path, count: int) -> Path:
    hosts = "".join(f"    h{i}: {{ansible_connection: local}}\n" for i in range(1, count + 1))
    path = tmp / "hosts.yml"
    path.write_text("all:\n  hosts:\n" + hosts)
    return path


def _watch(rigger: Any, book: Path, inventory: Path, state: Path, *args: str) -> Any:
    return rigger("watch", str(book), "-i", str(inventory), "--state-dir", str(state), "--interval", "0", *args)


def _events(state: Path) -> list[dict[str, Any]]:
    """The stream's whole lines: a line the watcher is still writing is left for the next read."""
    text = (state / "events.jsonl").read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def test_a_declared_healable_change_is_repaired_and_undeclared_drift_is_left_for_a_person(rigger, tmp_path):
    copy = f"{{dest: '{tmp_path}/data/{HOST}.conf', content: \"declared\\n\"}}"
    drift_task = f"    - name: config\n      copy: {copy}\n"
    book, inventory, state = _playbook(tmp_path, extra_task=drift_task), _inventory(tmp_path, 2), tmp_path / "state"
    assert rigger("run", str(book), "-i", str(inventory)).rc == 0
    (tmp_path / "data/h1.txt").unlink()  # h1: only a healable change is pending
    (tmp_path / "data/h2.txt").unlink()  # h2: that, and an edit nobody declared healable
    (tmp_path / "data/h2.conf").write_text("edited by hand\n")

    result = _watch(rigger, book, inventory, state, "--cycles", "1")

    assert result.rc == 0, result.stdout + result.stderr
    assert (tmp_path / "data/h1.txt").read_text() == "ok\n"
    assert not (tmp_path / "data/h2.txt").exists()  # a host with undeclared drift is not touched at all
    assert (tmp_path / "data/h2.conf").read_text() == "edited by hand\n"
    rows = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert " repaired " in rows["h1"] and " drift " in rows["h2"]
    drift = [e for e in _events(state) if e["event"] == "drift"]
    assert drift and drift[0]["host"] == "h2" and drift[0]["changes"][0]["module"] == "copy"
    plan = json.loads(Path(drift[0]["plan_file"]).read_text())  # the plan a person reviews and applies
    assert "h2" in json.dumps(plan) and "edited by hand" in json.dumps(plan)


def test_repairs_that_keep_failing_pause_the_host_with_the_evidence_across_restarts(rigger, tmp_path):
    (tmp_path / "data").mkdir()
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: all\n  gather_facts: false\n  vars:\n    rigger_watch_heal: [write_file]\n  tasks:\n"
        f"    - write_file: {{path: '{tmp_path}/missing-dir/x.txt', content: \"ok\\n\", backup: false}}\n"
    )
    inventory, state = _inventory(tmp_path, 1), tmp_path / "state"

    first = _watch(rigger, book, inventory, state, "--cycles", "2", "--backoff", "0", "--max-repairs", "2")
    assert first.rc == 0, first.stdout + first.stderr
    pauses = [e for e in _events(state) if e["event"] == "pause"]
    assert len(pauses) == 1 and "missing-dir" in pauses[0]["evidence"], pauses
    assert [e["event"] for e in _events(state)].count("repair") == 2

    # a new watcher (the controller restarted) keeps the pause: no third repair
    again = _watch(rigger, book, inventory, state, "--cycles", "1", "--backoff", "0", "--max-repairs", "2")
    assert again.rc == 0 and [e["event"] for e in _events(state)].count("repair") == 2
    status = rigger("watch-status", "--state-dir", str(state))
    assert "paused" in status.stdout and "yes" in status.stdout

    cleared = rigger("watch-resume", "h1", "--state-dir", str(state))
    assert cleared.rc == 0 and "resumed: h1" in cleared.stdout
    third = _watch(rigger, book, inventory, state, "--cycles", "1", "--backoff", "0", "--max-repairs", "2")
    assert third.rc == 0 and [e["event"] for e in _events(state)].count("repair") == 3


def test_backoff_spaces_repairs_of_a_host(rigger, tmp_path):
    book, inventory, state = _playbook(tmp_path), _inventory(tmp_path, 1), tmp_path / "state"
    for _ in range(2):  # the file is removed after each repair: the host needs repair every round
        result = _watch(rigger, book, inventory, state, "--cycles", "1", "--backoff", "3600")
        assert result.rc == 0
        (tmp_path / "data/h1.txt").unlink(missing_ok=True)
    events = [e["event"] for e in _events(state)]
    assert events.count("repaired") == 1
    assert "backoff" in rigger("watch-status", "--state-dir", str(state)).stdout


def test_the_fleet_breaker_pauses_everything_when_most_hosts_need_repair_at_once(rigger, tmp_path):
    book, inventory, state = _playbook(tmp_path), _inventory(tmp_path, 4), tmp_path / "state"
    assert rigger("run", str(book), "-i", str(inventory)).rc == 0
    for name in ("h1", "h2", "h3"):
        (tmp_path / f"data/{name}.txt").unlink()

    result = _watch(rigger, book, inventory, state, "--cycles", "1")

    assert result.rc == 0
    assert not any((tmp_path / f"data/{name}.txt").exists() for name in ("h1", "h2", "h3"))
    assert "FLEET PAUSED" in result.stdout
    assert next(e for e in _events(state) if e["event"] == "breaker")["hosts"] == ["h1", "h2", "h3"]
    assert rigger("watch-resume", "--fleet", "--state-dir", str(state)).rc == 0
    healed = _watch(rigger, book, inventory, state, "--cycles", "1", "--breaker-share", "0.9")
    assert healed.rc == 0 and all((tmp_path / f"data/{name}.txt").exists() for name in ("h1", "h2", "h3"))


def test_an_unknown_module_in_the_heal_list_is_refused_naming_the_play(rigger, tmp_path):
    book, inventory, state = _playbook(tmp_path, heal="[serve_vlm]"), _inventory(tmp_path, 1), tmp_path / "state"
    result = _watch(rigger, book, inventory, state, "--cycles", "1")
    assert result.rc == 4
    assert "site.yml" in result.stderr and "did you mean 'serve_vllm'" in result.stderr
    assert not (tmp_path / "data/h1.txt").exists()


def _start_watch(tmp: Path, book: Path, inventory: Path, state: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "watch",
            str(book),
            "-i",
            str(inventory),
            "--state-dir",
            str(state),
            *args,
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), **own_run_lock()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_event(state: Path, event: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (state / "events.jsonl").exists():
            found = [e for e in _events(state) if e["event"] == event]
            if found:
                return found[-1]
        time.sleep(0.1)
    raise AssertionError(f"no {event!r} event in {timeout_s}s")


def test_between_rounds_a_persons_run_gets_the_lock_and_sigterm_stops_cleanly(rigger, tmp_path):
    book, inventory, state = _playbook(tmp_path), _inventory(tmp_path, 1), tmp_path / "state"
    proc = _start_watch(tmp_path, book, inventory, state, "--interval", "300", "--metrics-port", "0")
    try:
        _wait_for_event(state, "cycle")
        person = rigger("run", str(book), "-i", str(inventory), "--lock-wait", "0")
        assert person.rc == 0, person.stdout + person.stderr  # the watcher holds no lock between rounds

        url = _wait_for_event(state, "metrics")["url"]
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        assert "rigger_watch_cycles_total 1" in text
        assert 'rigger_watch_host_state{host="h1",state="repaired"} 1' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 99, out + err
    assert "Traceback" not in err
    assert _events(state)[-1]["event"] == "stopped"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_during_a_repair_ends_its_command_and_leaves_no_process_or_lock(rigger, tmp_path, signum):
    slow = "    - name: slow repair\n      command: sleep 300\n"
    book = _playbook(tmp_path, heal="[write_file, command]", extra_task=slow)
    inventory, state = _inventory(tmp_path, 1), tmp_path / "state"
    proc = _start_watch(tmp_path, book, inventory, state, "--interval", "0")
    _wait_for_event(state, "repair")
    sleeper = wait_for_child(psutil.Process(proc.pid), "sleep")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 99, out + err
    assert "Traceback" not in err, err
    assert [e["signal"] for e in _events(state) if e["event"] == "interrupted"] == [signum.name]
    assert not (psutil.pid_exists(sleeper.pid) and sleeper.status() != psutil.STATUS_ZOMBIE), out + err
    assert [e["event"] for e in _events(state)][-1] == "stopped", out + err
    other = tmp_path / "other.yml"  # a person's run right after: the run lock is free
    other.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: hi}\n")
    person = rigger("run", str(other), "-i", str(inventory), "--lock-wait", "0")
    assert person.rc == 0, person.stdout + person.stderr


def test_a_metrics_port_already_in_use_is_a_clear_option_error(rigger, tmp_path):
    """Fails before: ``--metrics-port`` on a port another process listens on ended in
    "unexpected error (a bug): OSError: Address already in use". Real: the CLI and a real
    listening socket on a port the kernel chose."""
    book, inventory, state = _playbook(tmp_path), _inventory(tmp_path, 1), tmp_path / "state"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _watch(rigger, book, inventory, state, "--cycles", "1", "--metrics-port", str(port))
    assert result.rc == 5, result.stderr
    assert f"--metrics-port {port}" in result.stderr and "in use" in result.stderr
    assert "a bug" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "data" / "h1.txt").exists()  # no round ran
