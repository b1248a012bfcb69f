"""patch_quant_config on copies of the Kimi-K2.5-NVFP4 config files.

Real: the module, the probes, LocalConnection writing real files in a temp dir, the
JSON of the published checkpoint (tests/fixtures/kimi-k2.5-nvfp4). Nothing is faked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import WriteRefused
from engine.module_api import Change, TaskContext, TaskFailed, Unchanged
from modules.checkpoints import patch_quant_config as mod

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kimi-k2.5-nvfp4"
DEFAULTS = {"kv_cache_dtype": None, "set": {}, "remove": {}, "state": "patched", "backup_suffix": ".rigger-orig"}


def make_ctx() -> TaskContext:
    return TaskContext(host_name="localhost", conn=ScopedConnection(LocalConnection()), facts={}, vars={})


def planning(ctx: TaskContext) -> TaskContext:
    assert isinstance(ctx.conn, ScopedConnection)
    return TaskContext(host_name=ctx.host_name, conn=ctx.conn.planning(), facts={}, vars={})


def args_for(model_dir: Path, **extra: Any) -> dict[str, Any]:
    return {**DEFAULTS, "path": str(model_dir), **extra}


def tree_hashes(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        + ("@" + os.readlink(p) if p.is_symlink() else "")
        for p in sorted(directory.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def run_task(model_dir: Path, **extra: Any):
    ctx = make_ctx()
    args = args_for(model_dir, **extra)
    change = mod.plan(planning(ctx), args)
    if isinstance(change, Unchanged):
        return None
    return mod.apply(ctx, args, change)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    target = tmp_path / "kimi"
    shutil.copytree(FIXTURE, target)
    return target


def test_check_mode_shows_the_diff_and_touches_nothing(model_dir: Path) -> None:
    before = tree_hashes(model_dir)
    change = mod.plan(planning(make_ctx()), args_for(model_dir, kv_cache_dtype="auto"))
    assert isinstance(change, Change)
    assert "config.json: - quantization_config.kv_cache_scheme" in change.summary
    assert "hf_quant_config.json: - quantization.kv_cache_quant_algo" in change.summary
    labels = [d.label for d in change.diffs]
    assert labels == [str(model_dir / "config.json"), str(model_dir / "hf_quant_config.json")]
    config_diff = change.diffs[0]
    assert '"kv_cache_scheme"' in config_diff.before
    assert '"kv_cache_scheme"' not in config_diff.after
    assert tree_hashes(model_dir) == before


def test_apply_removes_fp8_kv_and_keeps_order_and_indent(model_dir: Path) -> None:
    original_config = (model_dir / "config.json").read_text()
    original_hf = (model_dir / "hf_quant_config.json").read_text()
    result = run_task(model_dir, kv_cache_dtype="auto")
    assert result is not None and result.changed
    assert result.data["files"] == {
        "config.json": ["- quantization_config.kv_cache_scheme"],
        "hf_quant_config.json": ["- quantization.kv_cache_quant_algo"],
    }
    config_text = (model_dir / "config.json").read_text()
    hf_text = (model_dir / "hf_quant_config.json").read_text()
    config = json.loads(config_text)
    assert "kv_cache_scheme" not in config["quantization_config"]
    assert "kv_cache_quant_algo" not in json.loads(hf_text)["quantization"]
    # Only the removed lines differ: order, 2-space and 4-space indents all kept.
    removed = set(original_config.splitlines()) - set(config_text.splitlines())
    assert {line.strip() for line in removed} == {
        '"kv_cache_scheme": {',
        '"dynamic": false,',
        '"num_bits": 8,',
        '"type": "float"',
    }
    assert len(original_hf.splitlines()) - len(hf_text.splitlines()) == 1
    assert '\n        "quant_algo": "NVFP4",\n' in hf_text
    assert list(config) == list(json.loads(original_config))
    # Pristine originals kept next to the files.
    assert (model_dir / "config.json.rigger-orig").read_text() == original_config
    assert (model_dir / "hf_quant_config.json.rigger-orig").read_text() == original_hf


def test_second_run_is_ok_and_backup_is_not_overwritten(model_dir: Path) -> None:
    original = (model_dir / "config.json").read_bytes()
    assert run_task(model_dir, kv_cache_dtype="auto") is not None
    again = mod.plan(planning(make_ctx()), args_for(model_dir, kv_cache_dtype="auto"))
    assert isinstance(again, Unchanged) and "already patched" in again.msg
    # A later, different patch keeps the first (pristine) backup.
    edit = {"config.json": {"text_config.max_position_embeddings": 131072}}
    result = run_task(model_dir, set=edit)
    assert result is not None
    assert result.data["files"] == {"config.json": ["~ text_config.max_position_embeddings"]}
    assert (model_dir / "config.json.rigger-orig").read_bytes() == original


def test_restore_puts_originals_back_then_is_ok(model_dir: Path) -> None:
    before = tree_hashes(model_dir)
    run_task(model_dir, kv_cache_dtype="auto")
    assert tree_hashes(model_dir) != before
    result = run_task(model_dir, state="restored")
    assert result is not None and sorted(result.data["restored"]) == ["config.json", "hf_quant_config.json"]
    assert tree_hashes(model_dir) == before
    assert run_task(model_dir, state="restored") is None


def test_legacy_string_scheme_and_text_config_block(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"]["kv_cache_scheme"] = "FP8"
    config["text_config"]["quantization_config"] = {"quant_method": "modelopt", "kv_cache_scheme": "FP8"}
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    result = run_task(model_dir, kv_cache_dtype="auto")
    assert result is not None
    assert result.data["files"]["config.json"] == [
        "- text_config.quantization_config.kv_cache_scheme",
        "- quantization_config.kv_cache_scheme",
    ]
    patched = json.loads((model_dir / "config.json").read_text())
    assert patched["text_config"]["quantization_config"] == {"quant_method": "modelopt"}


def test_symlink_into_hf_cache_is_replaced_and_blob_untouched(tmp_path: Path, model_dir: Path) -> None:
    blobs = tmp_path / "hub" / "models--nvidia--Kimi" / "blobs"
    blobs.mkdir(parents=True)
    links = {}
    for name in ("config.json", "hf_quant_config.json"):
        data = (model_dir / name).read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (model_dir / name).unlink()
        (model_dir / name).symlink_to(blob)
        links[name] = (blob, data)
    result = run_task(model_dir, kv_cache_dtype="auto")
    assert result is not None
    assert any("symlink" in w for w in result.warnings)
    for name, (blob, data) in links.items():
        assert blob.read_bytes() == data, f"blob behind {name} was written through"
        assert not (model_dir / name).is_symlink()
        assert (model_dir / f"{name}.rigger-orig").resolve() == blob
    assert "kv_cache_scheme" not in (model_dir / "config.json").read_text()
    run_task(model_dir, state="restored")
    for name, (blob, data) in links.items():
        assert (model_dir / name).is_symlink() and (model_dir / name).resolve() == blob
        assert blob.read_bytes() == data


def test_corrupt_json_fails_clearly_and_leaves_file_untouched(model_dir: Path) -> None:
    broken = (model_dir / "config.json").read_text()[:-40]
    (model_dir / "config.json").write_text(broken)
    before = tree_hashes(model_dir)
    with pytest.raises(TaskFailed, match=r"config.json is not valid JSON \(line \d+"):
        run_task(model_dir, kv_cache_dtype="auto")
    assert tree_hashes(model_dir) == before


def test_missing_required_file_and_bad_names_fail(model_dir: Path) -> None:
    (model_dir / "config.json").unlink()
    with pytest.raises(TaskFailed, match=r"config\.json does not exist"):
        run_task(model_dir, kv_cache_dtype="auto")
    with pytest.raises(TaskFailed, match="relative to the model directory"):
        run_task(model_dir, remove={"../etc/passwd": ["x"]})
    with pytest.raises(TaskFailed, match="does not exist"):
        run_task(model_dir / "nope", kv_cache_dtype="auto")


def test_plan_never_writes(model_dir: Path) -> None:
    ctx = planning(make_ctx())
    change = mod.plan(ctx, args_for(model_dir, kv_cache_dtype="auto"))
    assert isinstance(change, Change)
    with pytest.raises(WriteRefused):
        mod.apply(ctx, args_for(model_dir, kv_cache_dtype="auto"), change)
    assert not (model_dir / "config.json.rigger-orig").exists()


def test_hf_quant_config_is_optional_for_the_convenience(model_dir: Path) -> None:
    (model_dir / "hf_quant_config.json").unlink()
    result = run_task(model_dir, kv_cache_dtype="auto")
    assert result is not None and list(result.data["files"]) == ["config.json"]
    again = mod.plan(planning(make_ctx()), args_for(model_dir, kv_cache_dtype="auto"))
    assert isinstance(again, Unchanged)
    assert again.msg == "already patched: no edit left to make in config.json"


def test_general_set_and_remove_on_any_json_file(model_dir: Path) -> None:
    index = model_dir / "model.safetensors.index.json"
    index.write_text(json.dumps(json.loads(index.read_text()), indent=2, separators=(",", " : ")))
    result = run_task(
        model_dir,
        remove={"model.safetensors.index.json": ["metadata.total_size"]},
        set={"hf_quant_config.json": {"quantization.exclude_modules.0": "lm_head", "producer.patched_by": "rigger"}},
    )
    assert result is not None
    assert result.data["files"] == {
        "model.safetensors.index.json": ["- metadata.total_size"],
        "hf_quant_config.json": ["+ producer.patched_by", "~ quantization.exclude_modules.0"],
    }
    hf = json.loads((model_dir / "hf_quant_config.json").read_text())
    assert hf["quantization"]["exclude_modules"][0] == "lm_head"
    assert list(hf["producer"]) == ["name", "version", "patched_by"]
    # The index was not formatted the way json.dumps writes it: patched, with a warning.
    assert any("reformatted" in w for w in result.warnings)
    with pytest.raises(TaskFailed, match="is not an object"):
        run_task(model_dir, set={"config.json": {"model_type.x": 1}})
