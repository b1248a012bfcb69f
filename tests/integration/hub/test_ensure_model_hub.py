"""ensure_model against a real hub server: olah (offline mirror) on loopback.

Real: olah serving a git + git-lfs repository built by the test, huggingface_hub on the
"host" (this machine's python3, driven through LocalConnection), the filesystem, disk
free space from statvfs. Nothing is mocked. The low-disk case does not shrink a disk:
it raises `reserve_free_mib` above what is free, so the real free-space figure fails the
check (a tmpfs would need mount privileges CI may not have).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from olah_mirror import REPO_ID, OlahMirror, repo_files

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged
from modules.checkpoints import ensure_model as mod

pytestmark = pytest.mark.slow
SHARD = "model-00001-of-00002.safetensors"


class RecordingConnection(LocalConnection):
    """The real local transport, remembering every argv and env it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[str, ...], dict[str, str]]] = []

    def run(self, argv: Any, **kwargs: Any) -> Any:
        self.calls.append((tuple(argv), dict(kwargs.get("env") or {})))
        return super().run(argv, **kwargs)


def contexts(progress: list[str] | None = None, conn: LocalConnection | None = None) -> tuple[TaskContext, TaskContext]:
    scoped = ScopedConnection(conn or LocalConnection())
    sink = progress.append if progress is not None else (lambda _: None)
    run_ctx = TaskContext("localhost", scoped, {}, {}, progress=sink, timeout_s=120)
    plan_ctx = TaskContext("localhost", scoped.planning(), {}, {}, progress=sink, timeout_s=120)
    return plan_ctx, run_ctx


def args_for(local_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "repo_id": REPO_ID,
        "revision": "main",
        "local_dir": str(local_dir),
        "allow_patterns": None,
        "ignore_patterns": None,
        "max_workers": 4,
        "verify": "size",
        "python": sys.executable,
        "endpoint": None,
        "reserve_free_mib": 1,
        **extra,
    }


def converge(args: dict[str, Any], conn: LocalConnection | None = None) -> Result | Unchanged:
    plan_ctx, run_ctx = contexts(conn=conn)
    change = mod.plan(plan_ctx, args)
    if isinstance(change, Unchanged):
        return change
    return mod.apply(run_ctx, args, change)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_snapshot_exact(local_dir: Path) -> None:
    for name, data in repo_files().items():
        assert (local_dir / name).read_bytes() == data, f"{name} differs from the repo"


@pytest.fixture(scope="module")
def snapshot(mirror: OlahMirror, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One downloaded snapshot (branch revision) per module; tests work on copies."""
    local_dir = tmp_path_factory.mktemp("snapshot") / "model"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_ENDPOINT", mirror.endpoint)
        env.setenv("HF_HUB_DISABLE_XET", "1")
        assert isinstance(converge(args_for(local_dir)), Result)
    return local_dir


def fresh_copy(snapshot: Path, tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(snapshot, target, symlinks=True)
    assert isinstance(converge(args_for(target)), Unchanged)
    return target


def test_check_mode_lists_files_and_bytes_and_touches_nothing(tmp_path: Path) -> None:
    local_dir = tmp_path / "model"
    plan_ctx, _ = contexts()
    change = mod.plan(plan_ctx, args_for(local_dir))
    assert isinstance(change, Change)
    total = sum(len(d) for d in repo_files().values())
    # .gitattributes (git-lfs tracking line) is part of the repository too.
    assert change.summary.startswith("download 5 of 5 files (")
    assert change.payload["need_bytes"] > total
    assert f"{SHARD}: missing" in change.diffs[0].before
    assert not local_dir.exists()


def test_first_run_downloads_then_ok_offline_with_mirror_stopped(tmp_path: Path, mirror: OlahMirror) -> None:
    local_dir = tmp_path / "model"
    args = args_for(local_dir, revision=mirror.commit)
    progress: list[str] = []
    plan_ctx, run_ctx = contexts(progress)
    change = mod.plan(plan_ctx, args)
    assert isinstance(change, Change)
    result = mod.apply(run_ctx, args, change)
    assert result.changed and result.warnings == ()
    assert sorted(result.data["downloaded"]) == sorted([*repo_files(), ".gitattributes"])
    assert_snapshot_exact(local_dir)
    manifest = json.loads((local_dir / ".rigger-manifest.json").read_text())
    assert manifest["commit"] == mirror.commit
    shard = next(f for f in manifest["files"] if f["name"] == SHARD)
    assert shard["sha256"] == digest(local_dir / SHARD)
    mirror.stop()
    try:
        again = converge(args)
        assert isinstance(again, Unchanged), again
        assert "5 files" in again.msg and "verified (size)" in again.msg
        # And with sha256: every byte hashed locally, still no network.
        hashed = converge({**args, "verify": "sha256"})
        assert isinstance(hashed, Result) and hashed.data["downloaded"] == []
        assert isinstance(converge({**args, "verify": "sha256"}), Unchanged)
    finally:
        mirror.start()


def test_truncated_shard_is_detected_and_repaired(tmp_path: Path, snapshot: Path) -> None:
    local_dir = fresh_copy(snapshot, tmp_path)
    shard = local_dir / SHARD
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    plan_ctx, run_ctx = contexts()
    change = mod.plan(plan_ctx, args_for(local_dir))
    assert isinstance(change, Change)
    assert change.payload["fetch"] == [SHARD] and change.payload["force"] == [SHARD]
    assert f"{SHARD}: size ({len(data) // 2} bytes, expected {len(data)})" in change.diffs[0].before
    result = mod.apply(run_ctx, args_for(local_dir), change)
    assert result.data["downloaded"] == [SHARD]
    assert_snapshot_exact(local_dir)
    assert isinstance(converge(args_for(local_dir)), Unchanged)


def test_tampered_same_size_shard_is_caught_with_sha256(tmp_path: Path, snapshot: Path) -> None:
    local_dir = fresh_copy(snapshot, tmp_path)
    shard = local_dir / SHARD
    data = bytearray(shard.read_bytes())
    data[-10:] = b"X" * 10  # tensor bytes only: size and header stay consistent
    shard.write_bytes(bytes(data))
    # verify: size cannot see it (documented trade-off) ...
    assert isinstance(converge(args_for(local_dir)), Unchanged)
    # ... verify: sha256 does, and repairs it.
    plan_ctx, run_ctx = contexts()
    change = mod.plan(plan_ctx, args_for(local_dir, verify="sha256"))
    assert isinstance(change, Change)
    assert change.payload["fetch"] == [SHARD]
    assert f"{SHARD}: sha256 (sha256 " in change.diffs[0].before
    mod.apply(run_ctx, args_for(local_dir, verify="sha256"), change)
    assert_snapshot_exact(local_dir)


def test_bad_safetensors_header_is_never_ok(tmp_path: Path, snapshot: Path) -> None:
    local_dir = fresh_copy(snapshot, tmp_path)
    shard = local_dir / SHARD
    data = bytearray(shard.read_bytes())
    data[0:8] = (len(data)).to_bytes(8, "little")  # header length past the end of file
    shard.write_bytes(bytes(data))
    change = mod.plan(contexts()[0], args_for(local_dir))
    assert isinstance(change, Change) and "header" in change.diffs[0].before


def test_not_enough_disk_fails_before_downloading(tmp_path: Path) -> None:
    local_dir = tmp_path / "model"
    free_mib = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize // 2**20
    with pytest.raises(TaskFailed) as failed:
        mod.plan(contexts()[0], args_for(local_dir, reserve_free_mib=free_mib + 10))
    assert "not enough disk under" in failed.value.msg
    assert failed.value.data["need_bytes"] > 0 and failed.value.data["free_bytes"] > 0
    assert f"{failed.value.data['need_bytes']} bytes" in failed.value.msg
    assert f"{failed.value.data['free_bytes']} bytes" in failed.value.msg
    assert not local_dir.exists()


def test_branch_revision_warns_and_reports_the_commit(tmp_path: Path, mirror: OlahMirror) -> None:
    result = converge(args_for(tmp_path / "model"))
    assert isinstance(result, Result)
    (warning,) = result.warnings
    assert "not reproducible" in warning and mirror.commit in warning


def test_allow_patterns_config_only_and_partial_shards(tmp_path: Path) -> None:
    # Configs only (e.g. to run check_serving_compat before fetching weights): fine.
    result = converge(args_for(tmp_path / "configs", allow_patterns=["*.json"]))
    assert isinstance(result, Result)
    assert sorted(result.data["downloaded"]) == ["config.json", "model.safetensors.index.json"]
    # Some shards but not all: a partial model is never ok.
    with pytest.raises(
        TaskFailed,
        match=r"names model-00002-of-00002\.safetensors, which "
        r"is not in the file set",
    ):
        converge(args_for(tmp_path / "partial", allow_patterns=["*.json", "model-00001*"]))


def test_token_never_in_argv_env_or_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_rigger_test_token_do_not_leak"
    monkeypatch.setenv("HF_TOKEN", token)
    conn = RecordingConnection()
    result = converge(args_for(tmp_path / "model"), conn=conn)
    assert isinstance(result, Result)
    with pytest.raises(TaskFailed) as failed:
        converge(args_for(tmp_path / "other", repo_id="testorg/absent"), conn=conn)
    assert "testorg/absent" in failed.value.msg
    assert conn.calls, "the hub was reached through the connection"
    for argv, env in conn.calls:
        assert token not in " ".join(argv) and token not in json.dumps(env)
    assert token not in failed.value.msg and token not in json.dumps(result.data)


def test_interrupted_download_is_completed_on_the_next_run(tmp_path: Path, snapshot: Path) -> None:
    """A run killed mid-file leaves huggingface_hub's `.incomplete` file and no shard.

    The partial is placed where huggingface_hub keeps it (its own path helper). olah
    answers a Range request with the whole file (HTTP 200, seen in its log), so this
    pins that the next run completes the snapshot correctly; byte-level resume against a
    Range-capable hub is huggingface_hub's own behaviour.
    """
    from huggingface_hub._local_folder import get_local_download_paths

    local_dir = fresh_copy(snapshot, tmp_path)
    data = (local_dir / SHARD).read_bytes()
    (local_dir / SHARD).unlink()
    partial = get_local_download_paths(local_dir, SHARD).incomplete_path(hashlib.sha256(data).hexdigest())
    partial.write_bytes(data[: len(data) // 3])
    plan_ctx, run_ctx = contexts()
    change = mod.plan(plan_ctx, args_for(local_dir))
    assert isinstance(change, Change) and change.payload["fetch"] == [SHARD]
    result = mod.apply(run_ctx, args_for(local_dir), change)
    assert result.data["downloaded"] == [SHARD]
    assert_snapshot_exact(local_dir)
