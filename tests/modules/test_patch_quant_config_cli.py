"""End to end: `rigger run` on a playbook that patches a copy of the Kimi checkpoint config.

Real: the CLI (in the test process), the loader, executor, output layers, the module, real files.
Stand-in: none (no GPU involved; the compat step reports the no-GPU case).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from run_events import task_result

from tests.conftest import RiggerRun, run_rigger

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "kimi-k2.5-nvfp4"

PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
  - name: drop the FP8 KV-cache declaration
    patch_quant_config:
      path: {model}
      kv_cache_dtype: auto
  - name: preflight
    check_serving_compat:
      model: {model}
      fail_on: never
    register: compat
"""


def rigger(*argv: str) -> RiggerRun:
    return run_rigger(*argv, cwd=ROOT, timeout_s=120)


def hashes(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def setup(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "kimi"
    shutil.copytree(FIXTURE, model)
    playbook = tmp_path / "patch.yml"
    playbook.write_text(PLAYBOOK.format(model=model))
    return model, playbook


def test_check_diff_shows_json_diff_and_touches_nothing(tmp_path: Path) -> None:
    model, playbook = setup(tmp_path)
    before = hashes(model)
    text = rigger("run", str(playbook), "--check", "--diff")
    assert text.rc == 0, text.stdout + text.stderr
    assert '-    "kv_cache_scheme": {' in text.stdout
    assert '-        "kv_cache_quant_algo": "FP8",' in text.stdout
    assert "- quantization_config.kv_cache_scheme" in text.stdout
    assert hashes(model) == before
    jsonl = rigger("run", str(playbook), "--check", "--output", "jsonl").events
    patch = task_result(jsonl, "drop the FP8 KV-cache declaration")
    assert patch["status"] == "changed"
    assert [d["label"] for d in patch["diffs"]] == [str(model / "config.json"), str(model / "hf_quant_config.json")]
    assert hashes(model) == before


def test_apply_then_second_run_reports_no_change(tmp_path: Path) -> None:
    model, playbook = setup(tmp_path)
    first = rigger("run", str(playbook), "--output", "jsonl").events
    assert first[-1]["hosts"]["localhost"]["changed"] == 1
    compat = task_result(first, "preflight")
    assert compat["data"]["facts"]["model.kv_cache_fp8"] is False
    assert "kv_cache_scheme" not in json.loads((model / "config.json").read_text())["quantization_config"]
    second = rigger("run", str(playbook), "--output", "jsonl").events
    assert second[-1]["hosts"]["localhost"]["changed"] == 0
    assert second[-1]["hosts"]["localhost"]["failed"] == 0
