"""apt's autoremove: the apt-get command apply runs is the one Ansible's apt module runs.

Real: the apt module's plan and apply, the scoped connection, the probe parser. Not real:
the host is a RecordedHost answering from apt's own output, recorded in a private mount
namespace (tests/integration/packages/test_apt_local_repo.py runs the same against real
apt); it records the commands it is asked to run. Ansible's command lines
(ansible/modules/apt.py, 2.19): cleanup() runs `apt-get -y DPKG_OPTIONS [--purge]
autoremove`, remove() `apt-get -q -y DPKG_OPTIONS [--purge] --auto-remove remove PKGS`.
"""

from __future__ import annotations

from typing import Any

import pytest
from recorded_host import RecordedHost

from engine import registry
from engine.connection.base import ScopedConnection
from engine.module_api import Change, TaskContext

OPTIONS = "-o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
QUERY = "dpkg-query -W -f ${Package}\t${db:Status-Abbrev}\t${Version}\n -- "
HEAD = "Reading package lists...\nBuilding dependency tree...\nReading state information...\n"


def _ok(stdout: str = "") -> dict[str, Any]:
    return {"rc": 0, "stdout": stdout, "stderr": ""}


@pytest.mark.parametrize(
    ("args", "simulation", "removal", "verb"),
    [
        ({"autoremove": True}, f"apt-get -s -y {OPTIONS} autoremove", f"apt-get -y -q {OPTIONS} autoremove", "Remv"),
        (
            {"autoremove": True, "purge": True},
            f"apt-get -s -y {OPTIONS} --purge autoremove",
            f"apt-get -y -q {OPTIONS} --purge autoremove",
            "Purg",
        ),
        (
            {"name": "rgt-repo-hello", "state": "absent", "autoremove": True},
            f"apt-get -s -y {OPTIONS} --auto-remove remove -- rgt-repo-hello",
            f"apt-get -y -q {OPTIONS} --auto-remove remove -- rgt-repo-hello",
            "Remv",
        ),
        (
            {"name": "rgt-repo-hello", "state": "absent", "autoremove": True, "purge": True},
            f"apt-get -s -y {OPTIONS} --auto-remove purge -- rgt-repo-hello",
            f"apt-get -y -q {OPTIONS} --auto-remove purge -- rgt-repo-hello",
            "Purg",
        ),
    ],
)
def test_apply_runs_the_autoremove_that_ansible_runs(
    args: dict[str, Any], simulation: str, removal: str, verb: str
) -> None:
    removed = ["rgt-repo-lib"] if "name" not in args else ["rgt-repo-hello", "rgt-repo-lib"]
    listed = "".join(f"{verb} {name} [1.0]\n" for name in removed)
    host = RecordedHost(
        commands={
            simulation: _ok(HEAD + f"The following packages will be REMOVED:\n  {' '.join(removed)}\n" + listed),
            removal: _ok(f"Removing {removed[-1]} (1.0) ...\n"),
            **{QUERY + name: _ok(f"{name}\tii \t1.0\n") for name in removed},
        }
    )
    spec = registry.get("apt")
    full = spec.with_defaults(args)
    change = spec.plan(TaskContext("recorded", ScopedConnection(host).planning(), {}, {}), full)
    assert isinstance(change, Change) and spec.apply is not None
    assert change.diffs[0].before == "".join(f"{name} 1.0\n" for name in removed)
    assert change.diffs[0].after == "".join(f"{name} (removed)\n" for name in removed)
    result = spec.apply(TaskContext("recorded", ScopedConnection(host), {}, {}), full, change)
    apt_runs = [line for kind, line in host.calls if kind == "run" and line.startswith("apt-get ")]
    assert result.changed and apt_runs == [simulation, removal], apt_runs
