"""The pip module against real pip, a real venv it creates, and an offline wheelhouse.

Real: python3 -m venv, pip inside it, wheels fetched once from PyPI by `pip download` into
a wheelhouse the test makes; every install then runs offline from that wheelhouse
(`find_links` + `no_index`). Nothing is mocked. Check mode is shown to leave the venv's
files unchanged.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged

pytestmark = pytest.mark.slow
OLD, NEW = "1.16.0", "1.17.0"


def ctx(planning: bool) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext(host_name="localhost", conn=conn.planning() if planning else conn, facts={}, vars={})


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    house = tmp_path_factory.mktemp("wheelhouse")
    for version in (OLD, NEW):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(house), f"six=={version}"],
            check=True,
        )
    return house


def installed_six(venv) -> str | None:
    out = subprocess.run([f"{venv}/bin/python", "-m", "pip", "show", "six"], capture_output=True, text=True).stdout
    return next((line.split(": ")[1] for line in out.splitlines() if line.startswith("Version: ")), None)


def converge(args):
    spec = registry.get("pip")
    full = spec.with_defaults(args)
    change = spec.plan(ctx(True), full)
    result = spec.apply(ctx(False), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(ctx(True), full)


def test_pip_venv_pinned_then_latest_then_absent_offline(tmp_path, wheelhouse, digest):
    venv = tmp_path / "venv"
    offline = {"virtualenv": str(venv), "find_links": str(wheelhouse), "no_index": True}

    change = registry.get("pip").plan(ctx(True), registry.get("pip").with_defaults({**offline, "name": f"six=={OLD}"}))
    assert isinstance(change, Change) and "create" in change.summary and not venv.exists()

    change, result, again = converge({**offline, "name": [f"six=={OLD}"]})
    assert installed_six(venv) == OLD and result.data["packages"]["six"] == OLD
    assert isinstance(again, Unchanged)

    before = digest(venv)
    change = registry.get("pip").plan(
        ctx(True), registry.get("pip").with_defaults({**offline, "name": "six", "state": "latest"})
    )
    assert (
        isinstance(change, Change)
        and change.diffs[0].before == f"six {OLD}\n"
        and change.diffs[0].after == f"six {NEW}\n"
    )
    assert digest(venv) == before

    _, _, again = converge({**offline, "name": "six", "state": "latest"})
    assert installed_six(venv) == NEW and isinstance(again, Unchanged)

    change, _, again = converge({**offline, "name": "six>=1.0", "state": "absent"})
    assert change.diffs[0].before == f"six {NEW}\n" and installed_six(venv) is None and isinstance(again, Unchanged)


def test_pip_requirements_file_and_unresolvable_pin(tmp_path, wheelhouse):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"six=={NEW}\n")
    offline = {"virtualenv": str(venv), "find_links": str(wheelhouse), "no_index": True}
    change, _, again = converge({**offline, "requirements": str(requirements)})
    assert change.diffs[0].after == f"six {NEW}\n" and installed_six(venv) == NEW and isinstance(again, Unchanged)
    spec = registry.get("pip")
    with pytest.raises(TaskFailed, match="pip cannot resolve"):
        spec.plan(ctx(True), spec.with_defaults({**offline, "name": "six==0.0.1"}))


def test_pip_never_shows_an_index_token(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    spec = registry.get("pip")
    args = {
        "virtualenv": str(venv),
        "name": "rigger-no-such-package",
        "index_url": "http://rigger:s3cret-token@127.0.0.1:9/simple",
        "extra_args": "--retries 0 --timeout 2",
    }
    with pytest.raises(TaskFailed) as failure:
        spec.plan(ctx(True), spec.with_defaults(args))
    assert "pip cannot resolve rigger-no-such-package" in failure.value.msg and "s3cret-token" not in failure.value.msg
