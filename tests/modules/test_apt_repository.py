"""apt_repository: Ansible's line parsing and file naming, and apply's writes and revert.

Ansible's apt_repository has no argument that moves /etc/apt, so this module has none
either and nothing here writes /etc/apt: the plan cases (tests/plan_fixtures/apt_repository)
cover what it concludes from recorded hosts, and apply runs against a RecordedHost (the
real scoped connection over the recorded transport), which records the writes, commands
and probes it is asked for. Real: the module's code, the scoped connection, the probe
parser. Not real: the host (recorded); apt-get update's exit status is the recording's.
"""

from __future__ import annotations

from typing import Any

import pytest
from recorded_host import RecordedHost

from engine import registry
from engine.connection.base import ScopedConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext
from modules.system.apt_repository import parse, suggest_filename

CUDA = (
    "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
    "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /"
)
NEW = "/etc/apt/sources.list.d/developer_download_nvidia_com_compute_cuda_repos_ubuntu2404_x86_64.list"
UPDATE = "apt-get -o DPkg::Lock::Timeout=300 update -q"


@pytest.mark.parametrize(
    ("source", "filename", "expected"),
    [
        (CUDA, None, NEW.rpartition("/")[2]),
        ("deb http://archive.ubuntu.com/ubuntu jammy main", None, "archive_ubuntu_com_ubuntu.list"),
        ("deb https://user:secret@apt.example.org/debian stable main", None, "apt_example_org_debian.list"),
        ("deb-src http://deb.debian.org/debian bookworm main", "debian-src", "debian-src.list"),
    ],
)
def test_the_file_is_named_as_ansible_suggests_it(source: str, filename: str | None, expected: str) -> None:
    assert suggest_filename(source, filename) == expected


def test_lines_parse_as_ansibles_sources_list() -> None:
    assert parse("  deb   http://a  b c   # note ").source == "deb http://a b c"
    assert parse("  deb   http://a  b c   # note ").comment == "note"
    assert not parse("#deb http://a b").enabled and parse("#deb http://a b").valid
    assert not parse("# just words").valid and parse("# just words").dump() == "# just words\n"


def _host(update_rc: int) -> RecordedHost:
    listing = {
        "paths": {},
        "listing": {"dirs": [], "files": []},
        "unresolved": [],
        "umask": 18,
        "uid": None,
        "gid": None,
    }
    removal = {**listing, "paths": {NEW: {"exists": True, "type": "file", "dev": 2049, "inode": 77}}}
    return RecordedHost(
        probes={"file_facts": [listing, removal], "file_set": {"done": True}},
        files={"/etc/apt/sources.list": "", NEW: None},
        commands={
            UPDATE: {"rc": update_rc, "stdout": "", "stderr": "E: The repository is not signed.\n"},
            "mkdir -p /var/lib/apt/periodic": {"rc": 0},
            "touch /var/lib/apt/periodic/update-success-stamp": {"rc": 0},
        },
    )


def _apply(host: RecordedHost) -> Any:
    spec = registry.get("apt_repository")
    args = spec.with_defaults({"repo": CUDA})
    change = spec.plan(TaskContext("recorded", ScopedConnection(host).planning(), {}, {}), args)
    assert isinstance(change, Change) and spec.apply is not None
    return spec.apply(TaskContext("recorded", ScopedConnection(host), {}, {}), args, change)


def test_apply_writes_the_new_file_then_updates_the_cache() -> None:
    host = _host(0)
    result = _apply(host)
    assert result.data["sources_added"] == [NEW] and result.data["sources_removed"] == []
    effects = [call for call in host.calls if call[0] in ("write", "run")]
    assert effects == [("write", NEW), ("run", UPDATE), ("run", "mkdir -p /var/lib/apt/periodic"),
                       ("run", "touch /var/lib/apt/periodic/update-success-stamp")]  # fmt: skip


def test_a_failed_update_puts_the_files_back_and_fails() -> None:
    host = _host(100)
    with pytest.raises(TaskFailed, match="Failed to update apt cache: command exited 100"):
        _apply(host)
    assert ("write", NEW) in host.calls and host.calls[-1] == ("probe", "file_set")
    removed = [args for name, args in host.probe_args if name == "file_set"]
    assert removed == [{"ops": [{"op": "remove", "path": NEW, "identity": [2049, 77]}]}]
