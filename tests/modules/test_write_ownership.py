"""Writes keep who owns a file and who may read it; interrupted writes leave no litter.

Real: write_file and patch_quant_config through the module contract on the local
connection, the fileio probe, chown/chmod as root (the suite runs as root) and as the
unprivileged `nobody` (a real setuid child), the umask, a writer process killed between
writing its temp file and renaming it. uid 4242 / gid 4243 need no passwd entry.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from owned_files import GROUP, OWNER, identity, owned, world_writable_dir
from test_core_modules import converge

TEMP_MARK = ".rigger-tmp-"  # the temp-file mark that says which file a temp file belongs to

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("these tests need root: they make files owned by another user")


def test_write_file_keeps_owner_group_and_mode_and_the_backup_is_as_private(tmp_path):
    """Fails today: the file became root's and the backup was a 0644 copy of a 0600 file."""
    path = owned(tmp_path / "token.env", 0o600)
    _, result, again = converge("write_file", {"path": str(path), "content": "secret=2\n"})
    assert path.read_text() == "secret=2\n" and result.changed
    assert identity(path) == (OWNER, GROUP, "0o600")
    backup = Path(result.data["backup"])
    assert backup.read_text() == "secret=1\n"
    assert identity(backup) == (OWNER, GROUP, "0o600")
    assert again.msg.endswith("is up to date")


def test_a_backup_drops_setuid_and_a_declared_mode_still_wins(tmp_path):
    path = owned(tmp_path / "tool", 0o4750)
    _, result, _ = converge("write_file", {"path": str(path), "content": "new\n", "mode": "0700"})
    assert identity(path) == (OWNER, GROUP, "0o700")
    assert identity(Path(result.data["backup"])) == (OWNER, GROUP, "0o750")


def test_a_new_file_gets_the_umask_or_the_declared_mode(tmp_path):
    """Fails today: a new file was 0644 whatever the umask."""
    old = os.umask(0o027)
    try:
        converge("write_file", {"path": str(tmp_path / "plain"), "content": "x\n"})
        converge("write_file", {"path": str(tmp_path / "declared"), "content": "x\n", "mode": "0604"})
    finally:
        os.umask(old)
    assert oct(stat.S_IMODE((tmp_path / "plain").stat().st_mode)) == "0o640"
    assert oct(stat.S_IMODE((tmp_path / "declared").stat().st_mode)) == "0o604"


INTERRUPTED_WRITER = """
import os, sys
from engine.probes import fileio
os.fsync = lambda fd: os._exit(9)  # killed after the temp file is written, before the rename
fileio.write_atomic(sys.argv[1], b"half-done\\n")
"""


def test_the_next_write_removes_temp_files_an_interrupted_write_left(tmp_path):
    """Fails today: temp files were `.rigger-RANDOM`, nobody's to clean up."""
    path = tmp_path / "serve.env"
    path.write_text("old\n")
    killed = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_WRITER, str(path)], env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert killed.returncode == 9
    left = [p.name for p in tmp_path.iterdir() if p.name != "serve.env"]
    assert len(left) == 1 and left[0].startswith(".serve.env" + TEMP_MARK)
    other = tmp_path / (".other.env" + TEMP_MARK + "0123456789ab")
    other.write_text("another file's temp")
    lookalike = tmp_path / (".serve.env" + TEMP_MARK + "not-ours")
    lookalike.write_text("a user's file")
    planted = owned(tmp_path / (".serve.env" + TEMP_MARK + "fedcba987654"), 0o600, "another user's file")
    converge("write_file", {"path": str(path), "content": "new\n", "backup": False})
    assert path.read_text() == "new\n"
    kept = sorted([path.name, other.name, lookalike.name, planted.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == kept


AS_NOBODY = """
import os, sys
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
os.setgid(65534); os.setuid(65534)  # after the imports: this python lives under /root
try:
    LocalConnection().write_file(sys.argv[1], b"taken over\\n")
except TaskFailed as exc:
    print(exc)
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    with world_writable_dir() as path:
        yield path


def test_a_writer_that_cannot_keep_the_owner_leaves_the_file_alone(shared_dir):
    """Fails today: `nobody` replaced another user's group-writable file with its own."""
    tmp_path = shared_dir
    path = owned(tmp_path / "shared.cfg", 0o666)
    done = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, str(path)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert "cannot keep the owner 4242:4243" in done.stdout, done.stdout + done.stderr
    assert path.read_text() == "secret=1\n" and identity(path) == (OWNER, GROUP, "0o666")
    assert [p.name for p in tmp_path.iterdir()] == ["shared.cfg"]


def test_patch_quant_config_keeps_the_owner_of_the_config_and_of_its_original(tmp_path):
    """Fails today: the patched config.json and its .rigger-orig became root's."""
    config = tmp_path / "config.json"
    owned(config, 0o640, json.dumps({"quantization_config": {"kv_cache_scheme": "fp8"}}, indent=2) + "\n")
    converge("patch_quant_config", {"path": str(tmp_path), "kv_cache_dtype": "auto"})
    assert json.loads(config.read_text()) == {"quantization_config": {}}
    assert identity(config) == (OWNER, GROUP, "0o640")
    assert identity(tmp_path / "config.json.rigger-orig") == (OWNER, GROUP, "0o640")
