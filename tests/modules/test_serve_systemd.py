"""serve_vllm with `manager: systemd`: the server as a unit of a real systemd manager.

Real: a systemd 252 user manager (tests/fakes/systemd_manager.py: `systemd --user` in a
mount namespace of its own, since PID 1 here is not systemd), its unit files, enable links,
daemon-reload, Restart= and the process it starts from the ExecStart rigger rendered; the
rigger CLI (`rigger run`, local connection, `unit_scope: user`) inside that namespace; the
argv and environment of the running server read back from /proc. Not real: vLLM (the
stand-in tests/fakes/fake_vllm/vllm answers /health, /v1/models and completions) and the
reboot (a new user manager on the same unit and config directories is the host after a
reboot: nothing of the old manager or its processes is left).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from isolated_home import own_run_lock
from ports import free_port
from systemd_manager import UserManager, user_manager

from engine.module_api import TaskFailed
from modules.serving.unitfile import UnitSpec, env_line, exec_word, render_unit

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "tests" / "fakes" / "fake_vllm" / "vllm"
KEY = "sk-rigger-test-secret-1234"
HOSTILE = "m %h $HOME ${HOME} \\ \" ' ; `x`\nline2"


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UserManager]:
    with user_manager(tmp_path_factory.mktemp("systemd")) as running:
        yield running


def serve(systemd: UserManager | None, tmp: Path, **args: Any) -> dict[str, Any]:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    given = {
        "name": "t",
        "model": str(model),
        "launcher": str(LAUNCHER),
        "port": args.pop("port", None) or free_port(),
        "manager": "systemd",
        "unit_scope": "user",
        "unit_dir": str(systemd.unit_dir) if systemd else None,
        "state_dir": str(tmp / "state"),
        "ready_timeout_s": 20,
        "stop_timeout_s": 5,
        **args,
    }
    return {"name": f"serve {args}", "serve_vllm": given}


def run(manager: UserManager, tmp: Path, *tasks: dict[str, Any], extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """`rigger run` of ``tasks`` inside the manager's namespace; its task results (rc 0 asserted)."""
    playbook = tmp / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": list(tasks)}]))
    inventory = tmp / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    argv = [sys.executable, "-m", "engine.cli", "run", str(playbook), "-i", str(inventory), "--output", "jsonl", *extra]
    env = {name: value for name, value in os.environ.items() if name != "XDG_RUNTIME_DIR"}
    env.update({"PYTHONPATH": str(REPO), "RIGGER_TEST_KEY": KEY, **own_run_lock()})
    done = subprocess.run(manager.inside(argv), env=env, capture_output=True, text=True, timeout=90)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert KEY not in done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [e for e in events if e["event"] == "task_result"]


def main_pid(manager: UserManager, unit: str = "rigger-vllm-t.service") -> int:
    return int(manager.show(unit, "MainPID"))


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def running(pid: int) -> bool:
    """Alive and not a zombie (a detached server's parent is PID 1 here, which may reap late)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def argv_of(pid: int) -> list[str]:
    return [word.decode() for word in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]


def environ_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in pairs if b"=" in pair)


# The rollout's way back (modules/serving/restore.py) for a recorded state, run in the
# manager's namespace as rigger runs there: the test process is outside it.
RELAUNCH = """
import json, sys
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext
from modules.serving import restore
ctx = TaskContext(host_name="localhost", conn=ScopedConnection(LocalConnection()), facts={}, vars={})
record = json.loads(sys.argv[1])
print(json.dumps(restore.relaunch(ctx, record, api_key=None, ready_timeout_s=20, stop_timeout_s=5)))
"""


def relaunch(manager: UserManager, record: dict[str, Any]) -> dict[str, Any]:
    env = {name: value for name, value in os.environ.items() if name != "XDG_RUNTIME_DIR"}
    argv = manager.inside([sys.executable, "-c", RELAUNCH, json.dumps(record)])
    done = subprocess.run(argv, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_start_rerun_change_and_stop(manager: UserManager, tmp_path: Path) -> None:
    """One play: start, the same task again, a spec change, a restart-policy change; then
    another: stop, stop again. Each task's result names the pid it found or started."""
    port = free_port()
    tasks = [
        serve(manager, tmp_path, port=port),
        serve(manager, tmp_path, port=port),
        serve(manager, tmp_path, port=port, max_model_len=77),
        serve(manager, tmp_path, port=port, max_model_len=77, unit_restart="always"),
    ]
    started, again, changed, policy = run(manager, tmp_path, *tasks)
    pid, new_pid = started["data"]["pid"], changed["data"]["pid"]
    assert started["changed"] and started["data"]["unit"] == "rigger-vllm-t.service", started
    assert not again["changed"] and again["data"]["pid"] == pid, again
    assert changed["changed"] and new_pid != pid and not running(pid), changed
    assert policy["changed"] and policy["data"]["pid"] == new_pid, policy  # rewritten and reloaded, not restarted
    assert main_pid(manager) == new_pid and "--max-model-len" in argv_of(new_pid)
    assert manager.show("rigger-vllm-t.service", "Restart") == "always"
    assert manager.systemctl("is-enabled", "rigger-vllm-t.service").stdout.strip() == "enabled"
    unit_text = (manager.unit_dir / "rigger-vllm-t.service").read_text()
    assert f"X-Rigger-Spec-Hash={changed['data']['spec_hash']}" in unit_text
    record = json.loads((tmp_path / "state" / "t.json").read_text())
    assert (record["pid"], record["unit_scope"], record["boot_id"]) == (new_pid, "user", boot_id())

    stop = serve(manager, tmp_path, port=port, state="stopped")
    stopped, still = run(manager, tmp_path, stop, stop)
    assert stopped["changed"] and not still["changed"], (stopped, still)
    assert manager.show("rigger-vllm-t.service", "ActiveState") == "inactive"
    assert manager.systemctl("is-enabled", "rigger-vllm-t.service").stdout.strip() == "disabled"
    assert not running(new_pid)


def test_a_rollback_brings_the_recorded_unit_back(manager: UserManager, tmp_path: Path) -> None:
    """The first server's record relaunched after a spec change (a rollout's rollback): the
    unit is written again from the record and restarted; its new MainPID serves the old argv."""
    port = free_port()
    (started,) = run(manager, tmp_path, serve(manager, tmp_path, name="back", port=port))
    first_record = json.loads((tmp_path / "state" / "back.json").read_text())
    (changed,) = run(manager, tmp_path, serve(manager, tmp_path, name="back", port=port, max_model_len=77))
    back = relaunch(manager, first_record)
    unit = "rigger-vllm-back.service"
    assert back["pid"] == main_pid(manager, unit) not in (changed["data"]["pid"], started["data"]["pid"])
    assert "--max-model-len" not in argv_of(back["pid"])
    unit_text = (manager.unit_dir / unit).read_text()
    assert f"X-Rigger-Spec-Hash={started['data']['spec_hash']}" in unit_text
    assert json.loads((tmp_path / "state" / "back.json").read_text())["pid"] == back["pid"]
    manager.systemctl("disable", "--now", unit)


def test_switching_managers_restarts_under_the_other_and_leaves_no_unit_enabled(
    manager: UserManager, tmp_path: Path
) -> None:
    """One play: detached, then the same spec under systemd, then detached again, then stopped.
    The spec hash is the same each time; the manager alone makes the restart."""
    port, unit = free_port(), "rigger-vllm-sw.service"
    tasks = [
        serve(manager, tmp_path, name="sw", port=port, manager=wanted) for wanted in ("detached", "systemd", "detached")
    ]
    tasks.append(serve(manager, tmp_path, name="sw", port=port, manager="detached", state="stopped"))
    detached, as_unit, back, stopped = run(manager, tmp_path, *tasks)
    assert [r["changed"] for r in (detached, as_unit, back, stopped)] == [True, True, True, True]
    assert detached["data"]["spec_hash"] == as_unit["data"]["spec_hash"] == back["data"]["spec_hash"]
    assert (detached["data"]["manager"], as_unit["data"]["manager"], back["data"]["manager"]) == (
        "detached",
        "systemd",
        "detached",
    )
    pids = [detached["data"]["pid"], as_unit["data"]["pid"], back["data"]["pid"]]
    assert len(set(pids)) == 3 and not any(running(pid) for pid in pids)
    assert manager.show(unit, "ActiveState") == "inactive"
    assert manager.systemctl("is-enabled", unit).stdout.strip() == "disabled"


def test_check_mode_shows_the_unit_and_writes_nothing(manager: UserManager, tmp_path: Path) -> None:
    units_before = sorted(p.name for p in manager.unit_dir.iterdir())
    (planned,) = run(manager, tmp_path, serve(manager, tmp_path, name="chk"), extra=("--check", "--diff"))
    assert planned["changed"], planned
    assert "ExecStart=" in json.dumps(planned) and "rigger-vllm-chk.service" in json.dumps(planned)
    assert sorted(p.name for p in manager.unit_dir.iterdir()) == units_before
    assert not (tmp_path / "state").exists()
    assert manager.show("rigger-vllm-chk.service", "LoadState") == "not-found"


def test_hostile_values_reach_the_server_unchanged_and_the_key_stays_out_of_the_unit(
    manager: UserManager, tmp_path: Path
) -> None:
    """`%h`, `$HOME`, quotes, `;`, a newline: in the served name (an option's value), in an
    extra argument and in the environment; the server's own argv and environ are the proof."""
    task = serve(
        manager,
        tmp_path,
        name="hostile",
        served_model_name=HOSTILE,
        extra_args=["--fake-note", "--x", "%%h $$HOME"],
        env={"HOSTILE": HOSTILE},
        api_key_env="RIGGER_TEST_KEY",
    )
    (started,) = run(manager, tmp_path, task)
    pid = main_pid(manager, "rigger-vllm-hostile.service")
    argv = argv_of(pid)[1:]  # the stand-in is a script: the kernel runs `python3 SCRIPT ARGS...`
    assert argv == started["data"]["argv"] and argv[argv.index("--served-model-name") + 1] == HOSTILE
    assert argv[-3:] == ["--fake-note", "--x", "%%h $$HOME"]
    environ = environ_of(pid)
    assert environ["HOSTILE"] == HOSTILE and environ["VLLM_API_KEY"] == KEY
    unit = manager.unit_dir / "rigger-vllm-hostile.service"
    env_file = tmp_path / "state" / "hostile.env"
    assert KEY not in unit.read_text() and KEY in env_file.read_text()
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert KEY not in (tmp_path / "state" / "hostile.json").read_text()
    manager.systemctl("stop", "rigger-vllm-hostile.service")


def wait_restarted(manager: UserManager, old_pid: int) -> int:
    """The unit's MainPID once systemd started a process other than ``old_pid``."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        pid = main_pid(manager)
        if pid not in (0, old_pid) and manager.show("rigger-vllm-t.service", "ActiveState") == "active":
            return pid
        time.sleep(0.05)
    raise AssertionError(f"systemd did not start rigger-vllm-t.service again (MainPID {main_pid(manager)})")


def reboot_task(root: Path, tmp: Path, port: int) -> dict[str, Any]:
    return serve(None, tmp, port=port, unit_dir=str(root / "data" / "systemd" / "user"), unit_restart_sec=0.1)


def test_after_a_crash_systemd_starts_it_again_and_rigger_finds_it(tmp_path: Path) -> None:
    """Its server killed, systemd starts it again (Restart=on-failure, RestartSec=0.1): the
    next run finds it by the unit's MainPID (another pid than recorded) and changes nothing."""
    root, port = tmp_path / "systemd", free_port()
    root.mkdir()
    task = reboot_task(root, tmp_path, port)
    with user_manager(root) as manager:
        (started,) = run(manager, tmp_path, task)
        os.kill(started["data"]["pid"], signal.SIGKILL)
        restarted = wait_restarted(manager, started["data"]["pid"])
        (found,) = run(manager, tmp_path, task)
        assert not found["changed"] and found["data"]["pid"] == restarted, found


def test_after_a_reboot_the_unit_serves_again_without_a_rigger_run(tmp_path: Path) -> None:
    """The unit is enabled; the manager stops (its processes with it) and a new one starts
    on the same directories, as after a reboot: the server answers with no rigger run, and
    the next run finds it by the unit's MainPID and changes nothing."""
    root, port = tmp_path / "systemd", free_port()
    root.mkdir()
    task = reboot_task(root, tmp_path, port)
    with user_manager(root) as before:
        (started,) = run(before, tmp_path, task)
    assert not running(started["data"]["pid"])
    with user_manager(root) as after:
        pid = wait_restarted(after, started["data"]["pid"])
        found, again = run(after, tmp_path, task, task)
        assert not found["changed"] and found["data"]["pid"] == pid, found
        assert not again["changed"] and again["data"]["pid"] == main_pid(after) == pid, again
        assert json.loads((tmp_path / "state" / "t.json").read_text())["pid"] == pid  # recorded as ours now


# --- the renderer alone: what systemd would read is checked above; here what is refused ---

REFUSED = [
    (lambda: exec_word("a\x00b"), "control character"),
    (lambda: exec_word("a\x1bb"), "control character"),
    (lambda: env_line("BAD-NAME", "x"), "not a valid environment variable name"),
    (lambda: env_line("A", "x\ry"), "control character"),
    (lambda: render_unit(UnitSpec("t", ("vllm", "serve"), "/e", "/l", "h")), "absolute path"),
    (lambda: render_unit(UnitSpec("t", ("/v",), "/e", "relative.log", "h")), "absolute path"),
    (lambda: render_unit(UnitSpec("t", ("/v",), "/e", "/l\n[Service]", "h")), "control character"),
]


@pytest.mark.parametrize(("render", "says"), REFUSED)
def test_what_a_unit_cannot_carry_is_refused_by_name(render: Any, says: str) -> None:
    with pytest.raises(TaskFailed, match=says):
        render()


def test_the_unit_carries_order_mounts_restart_and_the_spec_hash() -> None:
    text = render_unit(UnitSpec("t", ("/v", "serve"), "/s/t.env", "/s/t%.log", "abc", "always", mounts=("/m odel",)))
    for line in (
        "After=network-online.target nvidia-persistenced.service",
        "Wants=network-online.target nvidia-persistenced.service",
        'RequiresMountsFor="/m odel"',
        "X-Rigger-Spec-Hash=abc",
        "Restart=always",
        "EnvironmentFile=/s/t.env",
        "StandardOutput=append:/s/t%%.log",
        'ExecStart="/v" "serve"',
    ):
        assert line in text.splitlines(), (line, text)
