"""ansible.posix's mount through the module contract on this machine.

Real: the local connection, the file primitive writing a scratch fstab (the module's own
`fstab` argument, as ansible.posix takes it), /proc/self/mountinfo, and for `mounted` /
`unmounted` / `absent` the real mount(8) and umount(8) mounting a tmpfs. Those run as root
inside a private mount namespace of their own (`unshare -m --propagation private`), so
nothing is mounted on this machine. Not real: the fstab is not /etc/fstab.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged

REPO = Path(__file__).resolve().parents[2]


def converge(args: dict[str, Any]) -> tuple[Any, Any, Any]:
    spec = registry.get("mount")
    full = spec.with_defaults(spec.coerced(args))
    conn = ScopedConnection(LocalConnection())
    change = spec.plan(TaskContext("localhost", conn.planning(), {}, {}), full)
    result = spec.apply(TaskContext("localhost", conn, {}, {}), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(TaskContext("localhost", conn.planning(), {}, {}), full)


FSTAB = "# /etc/fstab: static file system information.\nUUID=1234 / ext4 errors=remount-ro 0 1\n\n"


def test_present_appends_the_line_then_rewrites_it_only_when_a_field_differs(tmp_path: Path) -> None:
    fstab = tmp_path / "fstab"
    fstab.write_text(FSTAB)
    args = {"path": "/models", "src": "nas:/export/models", "fstype": "nfs", "opts": "ro,noatime", "state": "present"}
    change, result, again = converge({**args, "fstab": str(fstab)})
    assert isinstance(change, Change) and change.summary == "write fstab /models" and result is not None
    assert fstab.read_text() == FSTAB + "nas:/export/models /models nfs ro,noatime 0 0\n"
    assert isinstance(again, Unchanged)
    fstab.write_text(FSTAB + "nas:/export/models\t/models  nfs ro,noatime\n")  # a person's spacing, 4 fields
    assert isinstance(converge({**args, "fstab": str(fstab)})[0], Unchanged)
    converge({**args, "fstab": str(fstab), "boot": False})
    assert fstab.read_text() == FSTAB + "nas:/export/models /models nfs ro,noatime,noauto 0 0\n"


def test_a_mount_point_with_a_space_is_escaped_and_absent_removes_every_line_of_it(tmp_path: Path) -> None:
    fstab = tmp_path / "fstab"
    fstab.write_text(FSTAB)
    base = {"path": "/mnt/model cache", "fstab": str(fstab)}
    converge({**base, "src": "tmpfs", "fstype": "tmpfs", "state": "present"})
    assert fstab.read_text().endswith("tmpfs /mnt/model\\040cache tmpfs defaults 0 0\n")
    _, result, again = converge({**base, "state": "absent"})
    assert result is not None and fstab.read_text() == FSTAB and isinstance(again, Unchanged)


def test_present_without_src_or_fstype_fails_and_an_unsupported_state_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TaskFailed, match="needs src and fstype"):
        converge({"path": "/models", "state": "present", "fstab": str(tmp_path / "fstab")})
    assert not (tmp_path / "fstab").exists()
    problems = list(registry.get("mount").validator.iter_errors({"path": "/models", "state": "remounted"}))
    assert problems and "'remounted' is not one of" in problems[0].message


NAMESPACE_STEPS = r"""
import json, os, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests/modules"]
from test_mount import converge
work = sys.argv[2]
point, fstab = work + "/mnt/scratch", work + "/fstab"
args = {"path": point, "src": "tmpfs", "fstype": "tmpfs", "opts": "size=1m", "fstab": fstab}
def mounted():
    return any(line.split()[4] == point for line in open("/proc/self/mountinfo"))
said = {}
change, result, again = converge({**args, "state": "mounted"})
said["mounted"] = [change.summary, mounted(), type(again).__name__, open(fstab).read()]
open(point + "/weights", "w").write("x")
change, result, again = converge({**args, "opts": "size=2m", "state": "mounted"})
said["remounted"] = [change.summary, os.path.exists(point + "/weights"), type(again).__name__]
change, result, again = converge({**args, "state": "unmounted"})
said["unmounted"] = [change.summary, mounted(), type(again).__name__, os.path.isdir(point)]
converge({**args, "state": "mounted"})
change, result, again = converge({**args, "state": "absent"})
said["absent"] = [change.summary, mounted(), os.path.exists(point), open(fstab).read(), type(again).__name__]
print(json.dumps(said))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs in a private mount namespace needs root")
def test_mounted_unmounted_and_absent_mount_for_real_in_a_private_namespace(tmp_path: Path) -> None:
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", NAMESPACE_STEPS, str(REPO), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    point = f"{tmp_path}/mnt/scratch"
    assert said["mounted"] == [
        f"write fstab, mount {point}",
        True,
        "Unchanged",
        f"tmpfs {point} tmpfs size=1m 0 0\n",
    ]
    assert said["remounted"] == [f"write fstab, remount {point}", True, "Unchanged"]
    assert said["unmounted"] == [f"unmount {point}", False, "Unchanged", True]
    assert said["absent"] == [f"write fstab, unmount {point}", False, False, "", "Unchanged"]
    assert not Path(point).exists() or not os.path.ismount(point)  # this machine's namespace never saw it
