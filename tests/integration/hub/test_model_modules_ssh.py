"""The model modules over SSH: code on the controller, files and downloads on the host.

Real: an OpenSSH sshd on 127.0.0.7 (the SSH tests' harness, tests/integration/ssh/sshlab.py),
paramiko, sudo, the olah mirror, huggingface_hub (the test interpreter) and vLLM's source in
.venv-vllm, run by the host side as root through `become` where the interpreter is root-only. Stand-in:
GPU facts are given as the facts probe's list (8 x SM 12.0).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from olah_mirror import REPO_ID, OlahMirror, repo_files

ROOT = Path(__file__).resolve().parents[3]
import sshlab

from engine.connection.base import ScopedConnection, TaskScope
from engine.connection.ssh.connection import SSHConnection
from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged
from modules.checkpoints import check_serving_compat, ensure_model, patch_quant_config

pytestmark = pytest.mark.slow
FIXTURE = ROOT / "tests" / "fixtures" / "kimi-k2.5-nvfp4"
VLLM_PYTHON = str(ROOT / ".venv-vllm" / "bin" / "python")


@pytest.fixture(scope="module")
def ssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHConnection]:
    work = tmp_path_factory.mktemp("models-ssh")
    work.chmod(0o755)
    try:
        key = sshlab.prepare_users(work)
        server = sshlab.start_sshd(work, "models", ("127.0.0.7",))
    except (sshlab.HarnessError, OSError) as exc:
        pytest.fail(f"sshd unavailable: {exc}")
    known = work / "known_hosts"
    known.write_text(server.known_hosts_lines())
    lab = sshlab.Lab(work, key, server, known)
    conn = lab.connect("gpu1")
    try:
        yield conn
    finally:
        conn.close()
        server.stop()


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A directory the SSH user owns (pytest's own tmp dirs are root-only)."""
    path = Path(tempfile.mkdtemp(prefix="rigger-models-ssh-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def contexts(
    conn: SSHConnection, *, become: bool, facts: dict[str, Any] | None = None
) -> tuple[TaskContext, TaskContext]:
    scoped = ScopedConnection(conn, TaskScope(become=become, timeout_s=120))
    return (
        TaskContext("gpu1", scoped.planning(), facts or {}, {}, timeout_s=120),
        TaskContext("gpu1", scoped, facts or {}, {}, timeout_s=120),
    )


def converge(
    module: Any, conn: SSHConnection, args: dict[str, Any], *, become: bool, facts: dict[str, Any] | None = None
) -> Result | Unchanged:
    plan_ctx, run_ctx = contexts(conn, become=become, facts=facts)
    change = module.plan(plan_ctx, args)
    if isinstance(change, Unchanged):
        return change
    assert isinstance(change, Change)
    return module.apply(run_ctx, args, change)


def test_patch_over_ssh_replaces_symlink_and_leaves_blob(ssh: SSHConnection, user_dir: Path) -> None:
    model, blobs = user_dir / "kimi", user_dir / "blobs"
    shutil.copytree(FIXTURE, model)
    blobs.mkdir()
    data = (model / "config.json").read_bytes()
    blob = blobs / hashlib.sha256(data).hexdigest()
    blob.write_bytes(data)
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(blob)
    owner = pwd.getpwnam(sshlab.USER_NOPASSWD)
    for path in (user_dir, *user_dir.rglob("*")):
        os.lchown(path, owner.pw_uid, owner.pw_gid)
    args = {
        "path": str(model),
        "kv_cache_dtype": "auto",
        "set": {},
        "remove": {},
        "state": "patched",
        "backup_suffix": ".rigger-orig",
    }
    result = converge(patch_quant_config, ssh, args, become=False)
    assert isinstance(result, Result) and result.changed
    assert blob.read_bytes() == data
    assert not (model / "config.json").is_symlink()
    assert b"kv_cache_scheme" not in (model / "config.json").read_bytes()
    assert (model / "config.json.rigger-orig").resolve() == blob
    assert isinstance(converge(patch_quant_config, ssh, args, become=False), Unchanged)
    restored = converge(patch_quant_config, ssh, {**args, "state": "restored"}, become=False)
    assert isinstance(restored, Result)
    assert (model / "config.json").resolve() == blob and blob.read_bytes() == data


def test_compat_over_ssh_reads_the_hosts_vllm(ssh: SSHConnection) -> None:
    assert Path(VLLM_PYTHON).exists(), "the vLLM CPU venv (.venv-vllm) is a prerequisite"
    facts = {
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "memory_total_mib": 97887,
                "compute_capability": "12.0",
            }
            for i in range(8)
        ]
    }
    args = {
        "model": str(FIXTURE),
        "tensor_parallel_size": 8,
        "gpu_memory_utilization": 0.9,
        "kv_cache_dtype": "auto",
        "fail_on": "incompatible",
        "vllm_python": VLLM_PYTHON,
        "vllm_version": None,
        "triton_mla_fp8": None,
    }
    plan_ctx, _ = contexts(ssh, become=True, facts=facts)
    result = check_serving_compat.plan(plan_ctx, args)
    assert result.data["facts"]["vllm.installed"] is True
    assert result.data["facts"]["vllm.triton_mla_fp8"] is True
    assert result.data["compatible"] is True


def test_ensure_model_over_ssh_downloads_on_the_host(ssh: SSHConnection, mirror: OlahMirror, user_dir: Path) -> None:
    local_dir = user_dir / "tiny"
    args = {
        "repo_id": REPO_ID,
        "revision": mirror.commit,
        "local_dir": str(local_dir),
        "allow_patterns": None,
        "ignore_patterns": None,
        "max_workers": 2,
        "verify": "sha256",
        "python": sys.executable,
        "endpoint": None,
        "reserve_free_mib": 1,
    }
    result = converge(ensure_model, ssh, args, become=True)
    assert isinstance(result, Result) and result.changed
    for name, data in repo_files().items():
        assert (local_dir / name).read_bytes() == data
    assert isinstance(converge(ensure_model, ssh, args, become=True), Unchanged)


def test_patch_without_permission_fails_clearly_and_changes_nothing(ssh: SSHConnection, user_dir: Path) -> None:
    """The SSH user may read but not write a root-owned model directory."""
    model = user_dir / "kimi"
    shutil.copytree(FIXTURE, model)
    user_dir.chmod(0o755)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    args = {
        "path": str(model),
        "kv_cache_dtype": "auto",
        "set": {},
        "remove": {},
        "state": "patched",
        "backup_suffix": ".rigger-orig",
    }
    with pytest.raises(TaskFailed, match=r"cannot patch .*config\.json.*become: true"):
        converge(patch_quant_config, ssh, args, become=False)
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


def test_unreadable_shard_fails_verification_clearly(ssh: SSHConnection, mirror: OlahMirror, user_dir: Path) -> None:
    """Downloaded as root; verified by the unprivileged user offline from the manifest."""
    local_dir = user_dir / "tiny"
    args = {
        "repo_id": REPO_ID,
        "revision": mirror.commit,
        "local_dir": str(local_dir),
        "allow_patterns": None,
        "ignore_patterns": None,
        "max_workers": 2,
        "verify": "sha256",
        "python": sys.executable,
        "endpoint": None,
        "reserve_free_mib": 1,
    }
    assert isinstance(converge(ensure_model, ssh, args, become=True), Result)
    user_dir.chmod(0o755)
    (local_dir / "model-00002-of-00002.safetensors").chmod(0o600)
    unprivileged = {**args, "python": "/usr/bin/python3"}  # no hub needed: manifest covers it
    with pytest.raises(TaskFailed, match=r"cannot verify .*Permission denied"):
        converge(ensure_model, ssh, unprivileged, become=False)
    assert isinstance(converge(ensure_model, ssh, unprivileged, become=True), Unchanged)
