"""script through the module contract on this machine: a controller file run on the host.

Real: the local connection, the script written through the file primitive into a private
directory under the acting user's ~/.ansible/tmp, run by the kernel (its #! line) or the
named interpreter, and removed after. Not real: HOME is a scratch directory (so the
private directory is made there), the controller files are in tmp_path.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged

SCRIPT = """#!/bin/sh
ME="$0" python3 -c 'import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "me": os.environ["ME"]}))' "$@"
echo warned >&2
exit "${EXIT:-0}"
"""


@pytest.fixture
def play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "play" / "files").mkdir(parents=True)
    (tmp_path / "play" / "files" / "probe.sh").write_text(SCRIPT)
    return tmp_path / "play"


def run(play: Path, args: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    spec = registry.get("script")
    full = spec.with_defaults(spec.coerced(args))
    conn = ScopedConnection(LocalConnection())
    variables = {"playbook_dir": str(play)}
    change = spec.plan(TaskContext("localhost", conn.planning(), {}, variables), full)
    if not isinstance(change, Change) or spec.apply is None:
        return change
    if env:
        conn = replace(conn, scope=replace(conn.scope, environment=env))
    return spec.apply(TaskContext("localhost", conn, {}, variables), full, change)


def test_the_script_runs_on_the_host_with_its_arguments_unexpanded_then_is_removed(play: Path, tmp_path: Path) -> None:
    result = run(play, {"cmd": "probe.sh --fast 'two words' $HOME"})
    said = json.loads(result.data["stdout_lines"][0])
    assert said["argv"] == ["--fast", "two words", "$HOME"]
    assert said["me"].startswith(f"{tmp_path}/home/.ansible/tmp/rigger-script-")
    assert result.changed and result.data["stderr_lines"] == ["warned"] and result.data["rc"] == 0
    assert list((tmp_path / "home" / ".ansible" / "tmp").iterdir()) == []  # removed after the run


def test_executable_and_chdir(play: Path, tmp_path: Path) -> None:
    (play / "files" / "probe.sh").chmod(0o644)
    result = run(play, {"cmd": "files/probe.sh x", "executable": "/bin/sh", "chdir": str(tmp_path)})
    said = json.loads(result.data["stdout"])
    assert said["argv"] == ["x"] and said["cwd"] == str(tmp_path)


def test_a_failing_script_fails_the_task_with_its_output_and_is_still_removed(play: Path, tmp_path: Path) -> None:
    with pytest.raises(TaskFailed, match="non-zero return code 3") as failed:
        run(play, {"cmd": "probe.sh"}, env={"EXIT": "3"})
    assert failed.value.data["stderr"] == "warned\n" and failed.value.data["rc"] == 3
    assert list((tmp_path / "home" / ".ansible" / "tmp").iterdir()) == []


def test_creates_and_removes_skip_without_running(play: Path, tmp_path: Path) -> None:
    skipped = run(play, {"cmd": "probe.sh", "creates": str(play)})
    assert isinstance(skipped, Unchanged) and skipped.msg == f"skipped, since {play} exists"
    skipped = run(play, {"cmd": "probe.sh", "removes": str(tmp_path / "absent")})
    assert isinstance(skipped, Unchanged) and skipped.msg == f"skipped, since {tmp_path / 'absent'} does not exist"
    assert not (tmp_path / "home" / ".ansible").exists()


def test_a_missing_script_and_an_option_as_executable_fail_before_the_host_is_touched(play: Path) -> None:
    with pytest.raises(TaskFailed, match=r"could not find 'nope\.sh'"):
        run(play, {"cmd": "nope.sh"})
    with pytest.raises(TaskFailed, match="executable: '--rcfile=/x' starts with '-'"):
        run(play, {"cmd": "probe.sh", "executable": "--rcfile=/x"})
