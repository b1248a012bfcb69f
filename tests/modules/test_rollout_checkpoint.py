"""The rollout's checkpoint files without a server: the bytes kept before the change, the
release's patch, and what a rollback writes back (modules/rollout/checkpoint.py).

Real: the rollout's keep / patch / put-back code, patch_quant_config's own plan and apply,
the probes (model_files, model_fileops, fileio), LocalConnection reading and writing real
files in a temp dir holding copies of the published Kimi-K2.5-NVFP4 config files
(tests/fixtures/kimi-k2.5-nvfp4), serve_vllm's plan. Not real: the previous server: its
state record is written by hand in the shape serve_vllm records (argv and config_sha256);
no process runs. tests/integration/local/test_rollout_patched_release.py runs the whole rollout.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, TaskContext
from modules.checkpoints import patch_quant_config
from modules.rollout import checkpoint, hoststep
from modules.rollout.fleet import SERVE_DEFAULTS, FleetHost, fleet
from modules.serving.spec import CONFIG_FILES, build_argv
from tests.conftest import tree_digest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kimi-k2.5-nvfp4"
LAUNCHER = Path(__file__).resolve().parents[1] / "fakes" / "fake_vllm" / "vllm"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    target = tmp_path / "kimi"
    shutil.copytree(FIXTURE, target)
    return target


def ctx() -> TaskContext:
    return TaskContext(host_name="h1", conn=ScopedConnection(LocalConnection()), facts={}, vars={})


def host(model: Path, **patch: Any) -> FleetHost:
    """h1 as the rollout's own argument handling makes it (fleet.fleet, the schema's defaults)."""
    given = {
        "hosts": ["h1"],
        "server": {"name": "kimi", "model": str(model), "launcher": str(LAUNCHER), "port": free_port()},
        "router": {"socket": "/nonexistent.sock", "backend": "vllm"},
        "checkpoint_patch": {"path": str(model), **patch} if patch else None,
    }
    (found,) = fleet(ctx(), registry.get("rollout").with_defaults(given))
    return found


def record(model: Path) -> dict[str, Any]:
    """The previous server's record as serve_vllm wrote it when it started on these files."""
    digests = {name: hashlib.sha256((model / name).read_bytes()).hexdigest() for name in CONFIG_FILES}
    return {"argv": list(build_argv({**SERVE_DEFAULTS, "model": str(model), "launcher": "vllm"})),
            "config_sha256": digests}  # fmt: skip


def keep_patch_put_back(model: Path, fleet_host: FleetHost) -> dict[str, list[str]]:
    kept = checkpoint.keep(ctx(), record(model), fleet_host.checkpoint_patch)
    assert checkpoint.apply_patch(ctx(), fleet_host) is not None
    return checkpoint.put_back(ctx(), kept)


def test_a_rollback_leaves_the_model_directory_as_it_was_before_the_rollout(model: Path) -> None:
    """kv_cache_dtype auto edits both files and backs each up; a rollback puts the bytes,
    the modes and the directory's listing back: the backups this rollout made are gone."""
    before = tree_digest(model)
    kept = checkpoint.keep(ctx(), record(model), host(model, kv_cache_dtype="auto").checkpoint_patch)
    assert sorted(kept.paths()) == [str(model / "config.json"), str(model / "hf_quant_config.json")]
    patched = checkpoint.apply_patch(ctx(), host(model, kv_cache_dtype="auto"))
    assert patched and patched["changed"] and (model / "config.json.rigger-orig").exists()
    assert tree_digest(model) != before
    files = checkpoint.put_back(ctx(), kept)
    assert tree_digest(model) == before
    assert sorted(files["restored"]) == sorted(kept.paths())
    assert sorted(files["backups_removed"]) == sorted(p + ".rigger-orig" for p in kept.paths())
    assert files["backups_left"] == []


def test_a_backup_that_was_there_before_the_rollout_stays_as_it_was(model: Path) -> None:
    """An earlier patch_quant_config run left config.json patched and its .rigger-orig: the
    rollback writes back the bytes the previous server read and keeps that backup."""
    earlier = host(model, set={"config.json": {"rigger_note": "earlier"}})
    assert earlier.checkpoint_patch is not None
    planned = patch_quant_config.plan(ctx(), earlier.checkpoint_patch)
    assert isinstance(planned, Change)
    patch_quant_config.apply(ctx(), earlier.checkpoint_patch, planned)
    before = tree_digest(model)
    files = keep_patch_put_back(model, host(model, kv_cache_dtype="auto"))
    assert tree_digest(model) == before
    assert (model / "config.json.rigger-orig").exists()
    assert files["backups_removed"] == [str(model / "hf_quant_config.json.rigger-orig")]
    assert files["backups_left"] == []  # not even looked at: it is no backup of this rollout's
    assert sorted(files["restored"]) == [str(model / "config.json"), str(model / "hf_quant_config.json")]


def test_a_symlinked_config_comes_back_as_the_same_symlink(tmp_path: Path, model: Path) -> None:
    """A huggingface-cache layout: config.json links to a blob. The patch replaces the link
    by a patched file (the blob is never written); the rollback puts the link back."""
    blob = tmp_path / "blobs" / "abc123"
    blob.parent.mkdir()
    shutil.move(model / "config.json", blob)
    (model / "config.json").symlink_to(Path("..") / "blobs" / "abc123")
    blob_bytes, before = blob.read_bytes(), tree_digest(model)
    files = keep_patch_put_back(model, host(model, kv_cache_dtype="auto"))
    assert tree_digest(model) == before and (model / "config.json").is_symlink()
    assert blob.read_bytes() == blob_bytes
    assert str(model / "config.json.rigger-orig") in files["backups_removed"]


def test_a_file_changed_since_the_previous_server_started_is_named_and_not_kept(model: Path) -> None:
    """Drift: hf_quant_config.json is not what the previous server read (its record says
    other bytes). It is named with both digests and not kept: a later edit of it by
    someone else stays. A file the patch edits is kept whatever the record says."""
    rec = record(model)
    (model / "hf_quant_config.json").write_text((model / "hf_quant_config.json").read_text() + "\n")
    kept = checkpoint.keep(ctx(), rec, None)
    (drifted,) = kept.drifted
    assert drifted["file"] == str(model / "hf_quant_config.json")
    assert drifted["recorded"] == rec["config_sha256"]["hf_quant_config.json"] != drifted["now"]
    assert kept.paths() == [str(model / "config.json")]
    (model / "hf_quant_config.json").write_text("{}\n")
    assert checkpoint.put_back(ctx(), kept)["restored"] == []
    assert (model / "hf_quant_config.json").read_text() == "{}\n"
    with_patch = checkpoint.keep(ctx(), rec, host(model, kv_cache_dtype="auto").checkpoint_patch)
    assert str(model / "hf_quant_config.json") in with_patch.paths() and with_patch.drifted


def test_the_drift_is_a_step_of_the_turn(model: Path) -> None:
    rec = record(model)
    (model / "config.json").write_text(json.dumps({"changed": True}))
    turn = hoststep.HostTurn("h1", "rollout-test")
    hoststep.keep_files(ctx(), host(model), rec, turn)
    steps = {s["step"]: s for s in turn.steps}
    assert [d["file"] for d in steps["config files drifted"]["files"]] == [str(model / "config.json")]
    assert steps["kept config files"]["files"] == [str(model / "hf_quant_config.json")]


def test_a_backup_with_other_bytes_is_not_the_rollouts_and_stays(model: Path) -> None:
    """Someone replaced the backup the patch made: the file gets its kept bytes by a write,
    and that backup is named and left where it is."""
    fleet_host = host(model, kv_cache_dtype="auto")
    kept = checkpoint.keep(ctx(), record(model), fleet_host.checkpoint_patch)
    pristine = (model / "config.json").read_bytes()
    checkpoint.apply_patch(ctx(), fleet_host)
    (model / "config.json.rigger-orig").write_text("{}\n")
    files = checkpoint.put_back(ctx(), kept)
    assert (model / "config.json").read_bytes() == pristine
    assert files["backups_left"] == [str(model / "config.json.rigger-orig")]
    assert (model / "config.json.rigger-orig").read_text() == "{}\n"


def test_check_mode_shows_the_patch_beside_serve_vllms_plan_on_the_patched_files(model: Path) -> None:
    """--check: the patch's diffs, and serve_vllm's plan reading config.json as the patch
    would leave it (its digest in the spec), while nothing on disk changes."""
    before = tree_digest(model)
    planned = hoststep.plan_host(ctx(), host(model, kv_cache_dtype="auto"))
    shown = hoststep.would_change("h1", planned)
    labels = [d["label"] for d in shown["diffs"]]
    assert labels[:2] == [str(model / "config.json"), str(model / "hf_quant_config.json")]
    assert "model config files (sha256)" in labels
    assert isinstance(planned.patch, Change)
    patched = next(d.after for d in planned.patch.diffs if d.label.endswith("/config.json")).encode()
    configs = next(d for d in shown["diffs"] if d["label"] == "model config files (sha256)")
    assert f"config.json {hashlib.sha256(patched).hexdigest()}" in configs["after"]
    assert shown["change"].startswith("edit config.json: ")
    pristine = hashlib.sha256((model / "config.json").read_bytes()).hexdigest()
    assert planned.fingerprint()[f"file:{model / 'config.json'}"] == f"sha256:{pristine}"
    assert tree_digest(model) == before
