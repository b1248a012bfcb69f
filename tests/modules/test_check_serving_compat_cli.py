"""End to end, the motivating case: Kimi-K2.5-NVFP4, TP 8, 8 x RTX PRO 6000 (SM 12.0).

Real: `rigger run` in a subprocess, fact gathering through the real nvidia-ml-py, the
modules, the rules file, real files. Stand-ins: the GPUs (the fake libnvidia-ml.so.1 from
tests/fakes/fake_nvml, which the real pynvml loads), and the vLLM build: none from before
PR #34597 is installed, so the playbook says `triton_mla_fp8: false` and
`vllm_version: "0.15.1"` for it (without a build read, the verdict would be "cannot tell").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from run_events import task_result

ROOT = Path(__file__).resolve().parents[2]
import fakenvml
from isolated_home import own_run_lock

FIXTURE = ROOT / "tests" / "fixtures" / "kimi-k2.5-nvfp4"
FIX_TEXT = (
    "no MLA attention backend on SM120 supports FP8 KV cache; remove the FP8 "
    "KV-cache declaration (patch_quant_config kv_cache_dtype: auto)"
)

PLAYBOOK = """\
- hosts: localhost
  gather_facts: true
  tasks:
  - name: preflight before
    check_serving_compat:
      model: {model}
      tensor_parallel_size: 8
      triton_mla_fp8: false
      vllm_version: "0.15.1"
      fail_on: never
    register: before
  - name: fix the checkpoint when the preflight says so
    patch_quant_config:
      path: {model}
      kv_cache_dtype: auto
    when: not before.compatible
  - name: preflight after
    check_serving_compat:
      model: {model}
      tensor_parallel_size: 8
      triton_mla_fp8: false
      vllm_version: "0.15.1"
"""


def run(playbook: Path, env: dict[str, str], *extra: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", str(playbook), "--output", "jsonl", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **own_run_lock(), **env},
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def by_task(events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return task_result(events, name)


def test_preflight_finds_the_sm120_fp8_problem_and_the_patch_fixes_it(tmp_path: Path) -> None:
    fake = fakenvml.create(tmp_path)
    fake.eight_gpus()
    model = tmp_path / "kimi"
    shutil.copytree(FIXTURE, model)
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(PLAYBOOK.format(model=model))

    checked = run(playbook, fake.env(), "--check")
    before = by_task(checked, "preflight before")
    assert before["data"]["facts"]["gpu.count"] == 8
    assert before["data"]["facts"]["gpu.sm"] == "12.0"
    assert before["data"]["compatible"] is False
    assert before["data"]["findings"][0]["message"] == FIX_TEXT
    # Check mode sees its own earlier changes (issue 19): the second preflight reads the
    # predicted, patched config and passes, while the files on disk are untouched.
    assert by_task(checked, "fix the checkpoint when the preflight says so")["status"] == "changed"
    predicted = by_task(checked, "preflight after")
    assert predicted["status"] == "ok" and predicted["data"]["compatible"] is True, predicted
    assert (model / "config.json").read_bytes() == (FIXTURE / "config.json").read_bytes()

    applied = run(playbook, fake.env())
    assert by_task(applied, "fix the checkpoint when the preflight says so")["changed"] is True
    after = by_task(applied, "preflight after")
    assert after["status"] == "ok" and after["data"]["compatible"] is True
    assert applied[-1]["hosts"]["localhost"]["failed"] == 0
