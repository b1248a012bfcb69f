"""systemd_service, systemd and service against a real systemd manager.

Real: a systemd 252 user manager (tests/fakes/systemd_manager.py: `systemd --user` in a
mount namespace of its own where /run/systemd/system marks systemd as booted, since PID 1
here is not systemd), its jobs, unit files and enable/mask symlinks, systemctl, and the rigger
CLI in a process of its own inside that namespace (`rigger run`, the local connection,
`scope: user`). The units are `sleep` services written to the manager's unit directory.
Not real: nothing else (no system-scope manager runs here, so system scope is exercised
only by the refusal on a host without systemd).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from isolated_home import own_run_lock
from systemd_manager import UserManager, user_manager

REPO = Path(__file__).resolve().parents[2]
UNIT = (
    "[Unit]\nDescription=rigger test\n[Service]\nExecStart=/bin/sleep 300\nExecReload=/bin/true\n"
    "[Install]\nWantedBy=default.target\n"
)


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UserManager]:
    with user_manager(tmp_path_factory.mktemp("systemd")) as running:
        yield running


def run_tasks(
    manager: UserManager | None, tmp: Path, tasks: list[dict[str, Any]], *extra: str
) -> tuple[int, list[dict[str, Any]], str]:
    """`rigger run` of ``tasks`` on this machine (inside the manager's namespace when given)."""
    playbook = tmp / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    inventory = tmp / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    argv = [sys.executable, "-m", "engine.cli", "run", str(playbook), "-i", str(inventory), "--output", "jsonl", *extra]
    # no XDG_RUNTIME_DIR: the module finds the user manager at /run/user/UID, as Ansible's does
    env = {name: value for name, value in os.environ.items() if name != "XDG_RUNTIME_DIR"}
    env.update({"PYTHONPATH": str(REPO), **own_run_lock()})
    done = subprocess.run(
        manager.inside(argv) if manager else argv, env=env, capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in done.stderr, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, [e for e in events if e["event"] == "task_result"], done.stdout + done.stderr


def unit_task(name: str, **args: Any) -> dict[str, Any]:
    return {"name": f"{name} {args}", "systemd_service": {"name": name, "scope": "user", **args}}


@pytest.fixture
def unit(manager: UserManager, request: pytest.FixtureRequest) -> str:
    name = f"t-{request.node.name.replace('[', '-').replace(']', '').replace('_', '-')[:60]}.service"
    manager.write_unit(name, UNIT)
    manager.systemctl("daemon-reload")
    return name


def only(results: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(results) == 1, results
    return results[0]


# (starting state: running?, asked state) -> changed?; the verb Ansible runs is implied
STATE_CASES = [
    (False, "started", True),
    (True, "started", False),
    (True, "stopped", True),
    (False, "stopped", False),
    (True, "restarted", True),
    (False, "restarted", True),
    (True, "reloaded", True),
]


@pytest.mark.parametrize(("running", "state", "changes"), STATE_CASES)
def test_state_acts_only_when_ansible_would(
    manager: UserManager, unit: str, tmp_path: Path, running: bool, state: str, changes: bool
) -> None:
    if running:
        assert manager.systemctl("start", unit).returncode == 0
    before = manager.show(unit, "MainPID")
    rc, results, out = run_tasks(manager, tmp_path, [unit_task(unit, state=state)])
    result = only(results)
    assert rc == 0 and result["changed"] is changes, out
    assert result["data"]["state"] == ("stopped" if state == "stopped" else "started")
    assert result["data"]["status"]["ActiveState"] == ("active" if running else "inactive")
    assert manager.show(unit, "ActiveState") == ("inactive" if state == "stopped" else "active")
    if state == "restarted" and running:  # a new process, not the old one left alone
        assert manager.show(unit, "MainPID") not in ("0", before)
    manager.systemctl("stop", unit)


def test_enabled_and_masked_converge_then_hold(manager: UserManager, unit: str, tmp_path: Path) -> None:
    rc, (first, again), out = run_tasks(manager, tmp_path, [unit_task(unit, enabled=True)] * 2)
    assert rc == 0 and first["changed"] and not again["changed"], out
    assert first["data"]["enabled"] is True and again["data"]["enabled"] is True
    assert manager.systemctl("is-enabled", unit).stdout.strip() == "enabled"
    rc, results, out = run_tasks(manager, tmp_path, [unit_task(unit, enabled=False, masked=True)])
    assert rc == 0 and only(results)["changed"], out
    assert manager.systemctl("is-enabled", unit).stdout.strip() == "masked"
    rc, results, out = run_tasks(manager, tmp_path, [unit_task(unit, masked=False, state="started")])
    assert rc == 0 and only(results)["changed"] and manager.show(unit, "ActiveState") == "active", out
    manager.systemctl("stop", unit)


def test_check_mode_reports_and_touches_nothing(manager: UserManager, unit: str, tmp_path: Path) -> None:
    rc, results, out = run_tasks(manager, tmp_path, [unit_task(unit, state="started", enabled=True)], "--check")
    assert rc == 0 and only(results)["changed"], out
    assert manager.show(unit, "ActiveState") == "inactive"
    assert manager.systemctl("is-enabled", unit).stdout.strip() == "disabled"


def test_daemon_reload_runs_first_so_a_new_unit_file_is_seen(manager: UserManager, tmp_path: Path) -> None:
    name = "t-reloaded.service"
    assert manager.show(name, "LoadState") == "not-found"  # the manager now remembers it as missing
    manager.write_unit(name, UNIT)
    rc, results, out = run_tasks(manager, tmp_path, [unit_task(name, state="started", daemon_reload=True)])
    assert rc == 0 and only(results)["changed"] and manager.show(name, "ActiveState") == "active", out
    manager.systemctl("stop", name)


def test_a_unit_systemd_does_not_know_fails_by_name(manager: UserManager, tmp_path: Path) -> None:
    rc, results, out = run_tasks(manager, tmp_path, [unit_task("t-no-such-unit.service", state="started")])
    result = only(results)
    assert rc == 2 and result["status"] == "failed", out
    assert "Could not find the requested service t-no-such-unit.service" in json.dumps(result)


def test_service_refuses_what_it_does_not_implement_by_name(manager: UserManager, tmp_path: Path) -> None:
    task = {"name": "pattern", "service": {"name": "t-x", "state": "started", "pattern": "sleep"}}
    rc, results, out = run_tasks(manager, tmp_path, [task])
    assert rc == 2 and "does not implement 'pattern'" in json.dumps(only(results)), out


@pytest.mark.parametrize("module", ["systemd", "systemd_service", "service"])
def test_a_host_without_systemd_is_refused_by_name(module: str, tmp_path: Path) -> None:
    if os.path.isdir("/run/systemd/system"):
        pytest.skip("this machine runs systemd as PID 1")
    rc, results, out = run_tasks(None, tmp_path, [{"name": "x", module: {"name": "ssh", "state": "started"}}])
    assert rc == 2 and "this host does not run systemd" in json.dumps(only(results)), out


def test_a_name_that_looks_like_an_option_is_refused(manager: UserManager, tmp_path: Path) -> None:
    rc, results, out = run_tasks(manager, tmp_path, [unit_task("--now", state="started")])
    assert rc == 2 and "starts with '-'" in json.dumps(only(results)), out


@pytest.mark.parametrize(
    ("module", "args", "says"),
    [
        ("systemd", "{name: vllm, state: started, restart: always}", "restart"),
        ("systemd_service", "{name: vllm, state: running}", "running"),
        ("service", "{name: docker, state: started, sleeep: 3}", "sleeep"),
        ("service", "{state: started}", "name"),
        ("systemd", "{name: vllm}", "state"),
    ],
)
def test_bad_arguments_are_refused_before_any_host(
    rigger: Any, tmp_path: Path, module: str, args: str, says: str
) -> None:
    """Real: `rigger validate` (the loader and the module's schema); no host is reached."""
    book = tmp_path / "play.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - {module}: {args}\n")
    run = rigger("validate", str(book))
    assert run.rc == 4 and f"{book}:4" in run.stderr and says in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
