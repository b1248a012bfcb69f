"""The apt module against this machine's real apt and dpkg, installing and removing `sl`.

Real: apt-get, apt-cache, dpkg and the Debian mirror (the one network this machine has),
the rigger CLI (in the test process) for the check-mode run. Nothing is mocked. `sl` (a small
leaf package) is only removed at the end if this test installed it.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged

pytestmark = pytest.mark.slow
PACKAGE = "sl"
DPKG_STATUS = Path("/var/lib/dpkg/status")


def ctx(planning: bool) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext(host_name="localhost", conn=conn.planning() if planning else conn, facts={}, vars={})


def dpkg_version(name: str) -> str | None:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}${Version}", name], capture_output=True, text=True
    ).stdout
    return out[3:] if out.startswith("ii") else None


def candidate(name: str) -> str:
    out = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True, check=True).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if "Candidate:" in line)


def status_digest() -> str:
    return hashlib.sha256(DPKG_STATUS.read_bytes()).hexdigest()


@pytest.fixture
def sl_package():
    if dpkg_version(PACKAGE) is not None:
        pytest.skip(f"{PACKAGE} is installed already and not ours to remove")
    try:
        yield candidate(PACKAGE)
    finally:
        if dpkg_version(PACKAGE) is not None:
            subprocess.run(["apt-get", "remove", "-y", "-q", PACKAGE], capture_output=True, check=True)


def test_apt_pinned_install_check_mode_and_removal(sl_package, rigger, tmp_path):
    version = sl_package
    spec = registry.get("apt")
    present = spec.with_defaults({"name": [f"{PACKAGE}={version}"], "install_recommends": False})
    before = status_digest()

    change = spec.plan(ctx(True), present)
    assert isinstance(change, Change)
    (diff,) = change.diffs
    assert f"{PACKAGE} (not installed)\n" in diff.before and f"{PACKAGE} {version}\n" in diff.after

    book = tmp_path / "apt.yml"
    book.write_text(f"- hosts: localhost\n  tasks:\n    - apt: {{name: '{PACKAGE}={version}'}}\n")
    run = rigger("run", str(book), "--check", "--diff", "--output", "jsonl")
    assert run.rc == 0, run.stdout + run.stderr
    assert run.totals("changed") == 1
    assert status_digest() == before and dpkg_version(PACKAGE) is None

    with pytest.raises(TaskFailed, match="apt cannot install"):
        spec.plan(ctx(True), spec.with_defaults({"name": f"{PACKAGE}=0.0-no-such-version"}))

    latest = spec.with_defaults({"name": PACKAGE, "state": "latest"})
    assert isinstance(spec.plan(ctx(True), latest), Change)

    result = spec.apply(ctx(False), present, change)
    assert result.data["packages"] == {PACKAGE: version} and dpkg_version(PACKAGE) == version
    assert isinstance(spec.plan(ctx(True), present), Unchanged)
    assert isinstance(spec.plan(ctx(True), latest), Unchanged)  # the pin is the candidate

    absent = spec.with_defaults({"name": PACKAGE, "state": "absent"})
    change = spec.plan(ctx(True), absent)
    assert isinstance(change, Change) and f"{PACKAGE} {version}\n" in change.diffs[0].before
    spec.apply(ctx(False), absent, change)
    assert dpkg_version(PACKAGE) is None
    assert isinstance(spec.plan(ctx(True), absent), Unchanged)


def test_apt_update_cache_then_cache_valid_time_skips_it():
    spec = registry.get("apt")
    stale = spec.with_defaults({"update_cache": True, "cache_valid_time": 0})
    change = spec.plan(ctx(True), stale)
    assert isinstance(change, Change) and change.summary == "update the apt cache"
    result = spec.apply(ctx(False), stale, change)
    assert result.data["cache_updated"]
    fresh = spec.with_defaults({"update_cache": True, "cache_valid_time": 3600})
    assert isinstance(spec.plan(ctx(True), fresh), Unchanged)
