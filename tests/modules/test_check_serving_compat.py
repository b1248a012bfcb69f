"""check_serving_compat on the Kimi-K2.5-NVFP4 config files.

Real: the module, the rules file, LocalConnection reading the fixture, and (where named)
the real vLLM CPU build in .venv-vllm, whose TRITON_MLA source is read by the probe.
Stand-in: the GPUs - host facts are given as the `gpus` list the facts probe produces
(8 x RTX PRO 6000 Blackwell SM 12.0, or H200 SM 9.0). `triton_mla_fp8: false` stands for
a vLLM build from before PR #34597 (none is installed here).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext, TaskFailed, Unchanged
from modules.checkpoints import check_serving_compat as mod
from modules.checkpoints import compat, patch_quant_config

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "kimi-k2.5-nvfp4"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
FIX_TEXT = (
    "no MLA attention backend on SM120 supports FP8 KV cache; remove the FP8 "
    "KV-cache declaration (patch_quant_config kv_cache_dtype: auto)"
)


def gpus(count: int, name: str, memory_mib: int, capability: str) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "name": name,
            "memory_total_mib": memory_mib,
            "memory_used_mib": 3,
            "compute_capability": capability,
            "processes": [],
        }
        for i in range(count)
    ]


RTX_PRO_6000 = gpus(8, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "12.0")
H200 = gpus(8, "NVIDIA H200", 143771, "9.0")


def run_check(model: Path, gpu_list: list[dict[str, Any]], *, planning: bool = True, **extra: Any) -> Unchanged:
    conn = ScopedConnection(LocalConnection())
    ctx = TaskContext(
        host_name="localhost",
        conn=conn.planning() if planning else conn,
        facts={"gpus": gpu_list, "gpu_count": len(gpu_list)},
        vars={},
    )
    args = {
        "model": str(model),
        "tensor_parallel_size": 8,
        "gpu_memory_utilization": 0.9,
        "kv_cache_dtype": "auto",
        "fail_on": "incompatible",
        "vllm_python": "python3",
        "vllm_version": None,
        "triton_mla_fp8": None,
        **extra,
    }
    # read-only: plan() does the whole check on the planning (write-refusing) connection
    return mod.plan(ctx, args)


def ids(result: Unchanged) -> list[str]:
    return [f["id"] for f in result.data["findings"]]


# Every NVFP4 MoE model on SM 12.x gets this warning (field-2026 F9): listed apart so each
# test names the finding it is about.
GOLDEN = "nvfp4-moe-sm12x-golden-output"


def problems(result: Unchanged) -> list[str]:
    """The incompatible and warning findings (info findings say what vLLM will do)."""
    return [f["id"] for f in result.data["findings"] if f["severity"] != "info"]


def test_kimi_on_sm120_with_old_vllm_is_incompatible_with_the_fix() -> None:
    with pytest.raises(TaskFailed) as failed:
        run_check(FIXTURE, RTX_PRO_6000, triton_mla_fp8=False, vllm_version="0.15.1")
    assert FIX_TEXT in failed.value.msg
    assert failed.value.data["compatible"] is False
    finding = failed.value.data["findings"][0]
    assert finding["id"] == "mla-fp8-kv-sm12x"
    assert "PR #34597" in finding["citation"]
    assert "config.json quantization_config.kv_cache_scheme" in finding["detail"]


def test_fail_on_never_reports_findings_as_data() -> None:
    result = run_check(FIXTURE, RTX_PRO_6000, triton_mla_fp8=False, fail_on="never")
    assert isinstance(result, Unchanged)  # read-only: never a change
    assert result.data["compatible"] is False
    assert problems(result) == ["mla-fp8-kv-sm12x", GOLDEN]
    # no MLA backend takes FP8 KV on SM 12.0 in that build: none is expected
    assert result.data["attention_backend"] is None
    assert result.data["facts"]["model.is_mla"] is True
    assert result.data["facts"]["gpu.sm_major"] == 12
    assert result.msg.startswith("INCOMPATIBLE")


def test_kimi_on_sm90_is_compatible() -> None:
    result = run_check(FIXTURE, H200, triton_mla_fp8=False, vllm_version="0.15.1")
    assert result.data["compatible"] is True
    # NVFP4 has no native kernels on Hopper: a warning, not a refusal
    assert problems(result) == ["nvfp4-marlin-fallback"]
    assert result.data["attention_backend"] == "FLASHMLA"  # FP8 KV on SM 9.0


@pytest.mark.slow  # needs the vLLM CPU venv, which the fast tier does not
def test_real_vllm_with_fp8_triton_mla_is_compatible_on_sm120() -> None:
    """Real vLLM 0.32 (CPU build) carries PR #34597: fp8 is in TRITON_MLA's dtypes."""
    assert VLLM_PYTHON.exists(), "the vLLM CPU venv (.venv-vllm) is a prerequisite"
    result = run_check(FIXTURE, RTX_PRO_6000, vllm_python=str(VLLM_PYTHON))
    facts = result.data["facts"]
    assert facts["vllm.installed"] is True and facts["vllm.version"]
    assert facts["vllm.triton_mla_fp8"] is True
    assert result.data["compatible"] is True and problems(result) == [GOLDEN]
    # the build serves FP8 KV: the advice is to keep the checkpoint's
    assert "mla-fp8-kv-served-by-triton-mla" in ids(result)


def test_vllm_not_found_on_sm120_warns_and_fail_on_warning_fails() -> None:
    result = run_check(FIXTURE, RTX_PRO_6000, vllm_python="/nonexistent/python3")
    assert problems(result) == ["mla-fp8-kv-sm12x-vllm-unknown", GOLDEN]
    # the build could not be read: never "compatible"
    assert result.data["compatible"] is None and result.warnings
    assert "the vLLM build could not be read" in result.data["cannot_tell"][0]
    assert result.msg.startswith("cannot tell: ")
    with pytest.raises(TaskFailed, match="could not tell"):
        run_check(FIXTURE, RTX_PRO_6000, vllm_python="/nonexistent/python3", fail_on="warning")


def test_patched_checkpoint_is_compatible_on_sm120(tmp_path: Path) -> None:
    model = tmp_path / "kimi"
    shutil.copytree(FIXTURE, model)
    ctx = TaskContext(host_name="localhost", conn=ScopedConnection(LocalConnection()), facts={}, vars={})
    args = {
        "path": str(model),
        "kv_cache_dtype": "auto",
        "set": {},
        "remove": {},
        "state": "patched",
        "backup_suffix": ".rigger-orig",
    }
    patch_quant_config.apply(ctx, args, patch_quant_config.plan(ctx, args))  # type: ignore[arg-type]
    result = run_check(model, RTX_PRO_6000, triton_mla_fp8=False, vllm_version="0.15.1")
    assert result.data["compatible"] is True
    assert result.data["facts"]["model.kv_cache_fp8"] is False
    assert result.data["attention_backend"] == "TRITON_MLA"


def test_non_mla_model_with_fp8_kv_is_compatible_on_sm120(tmp_path: Path) -> None:
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "quantization_config": {
                    "quant_method": "modelopt",
                    "quant_algo": "FP8",
                    "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
                },
            }
        )
    )
    result = run_check(model, RTX_PRO_6000, triton_mla_fp8=False, vllm_version="0.15.1")
    assert result.data["facts"]["model.is_mla"] is False
    assert result.data["facts"]["model.kv_cache_fp8"] is True
    assert result.data["compatible"] is True and problems(result) == []


def test_explicit_bf16_kv_on_an_fp8_checkpoint_is_incompatible() -> None:
    """vLLM still raises "Unsupported data type of kv cache: bfloat16" (#34752, open)."""
    result = run_check(FIXTURE, H200, kv_cache_dtype="bfloat16", vllm_version="0.32.0", fail_on="never")
    assert problems(result) == ["kv-dtype-override-vs-checkpoint-fp8", "nvfp4-marlin-fallback"]
    assert result.data["compatible"] is False
    assert "#34752" in result.data["findings"][0]["citation"]
    # The override itself is what vLLM uses: no FP8 KV, so SM 12.0 has no MLA problem.
    sm120 = run_check(
        FIXTURE, RTX_PRO_6000, kv_cache_dtype="bfloat16", triton_mla_fp8=False, vllm_version="0.15.1", fail_on="never"
    )
    assert problems(sm120) == ["kv-dtype-override-vs-checkpoint-fp8", GOLDEN]


def test_weights_larger_than_gpu_memory() -> None:
    small = gpus(8, "NVIDIA GeForce RTX 4090", 24564, "8.9")
    with pytest.raises(TaskFailed, match=r"weights \(540\.0 GiB\) do not fit") as failed:
        run_check(FIXTURE, small)
    assert "8 GPU(s) x 24.0 GiB" in failed.value.msg


def test_weights_leaving_little_kv_room_warn() -> None:
    h100 = gpus(8, "NVIDIA H100 80GB HBM3", 81559, "9.0")
    result = run_check(FIXTURE, h100, vllm_version="0.32.0")
    assert problems(result) == ["weights-leave-little-kv-cache", "nvfp4-marlin-fallback"]
    assert result.data["compatible"] is True


def test_tensor_parallel_size_checks() -> None:
    with pytest.raises(TaskFailed, match="64 attention heads are not divisible by tensor_parallel_size 3"):
        run_check(FIXTURE, H200, tensor_parallel_size=3)
    result = run_check(FIXTURE, H200, tensor_parallel_size=16, fail_on="never")
    assert "tp-exceeds-gpu-count" in ids(result)


def test_no_gpus_is_a_warning() -> None:
    result = run_check(FIXTURE, [], fail_on="never")
    assert problems(result) == ["no-gpus"]


def test_no_gpus_is_cannot_tell_never_compatible() -> None:
    result = run_check(FIXTURE, [], tensor_parallel_size=8, fail_on="never")
    assert result.data["compatible"] is None
    assert result.msg.startswith("cannot tell: ")
    assert "on 0 GPU(s), vLLM" in result.msg and "SM None" not in result.msg
    assert "no GPUs readable on this host" in result.msg


def test_gpus_without_a_compute_capability_are_cannot_tell() -> None:
    unknown = [{**gpu, "compute_capability": None} for gpu in H200]
    result = run_check(FIXTURE, unknown, fail_on="never")
    assert result.data["compatible"] is None
    assert result.data["cannot_tell"] == ["the compute capability of the 8 GPU(s) is unknown"]
    assert "SM None" not in result.msg


def test_missing_model_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(TaskFailed, match=r"config\.json does not exist"):
        run_check(tmp_path, H200)


def test_probe_reads_a_pre_34597_triton_mla_source_as_no_fp8() -> None:
    """The probe's source reader on text shaped like the two generations of the file."""
    namespace: dict[str, Any] = {"call": None}
    exec((ROOT / "modules" / "checkpoints" / "probes" / "model_vllm_info.py").read_text(), namespace)
    reader = namespace["triton_mla_fp8"]
    old = (
        "class TritonMLAImpl:\n    def __init__(self):\n        if is_quantized_kv_cache("
        "self.kv_cache_dtype):\n            raise NotImplementedError(\n"
        '                "TritonMLA V1 with FP8 KV cache not yet supported")\n'
    )
    new = (
        "class TritonMLABackend:\n    supported_kv_cache_dtypes: ClassVar[list] = [\n"
        '        "auto",\n        "bfloat16",\n        "fp8",\n        "fp8_e4m3",\n    ]\n'
    )
    assert reader(old) is False
    assert reader(new) is True
    assert reader("nothing here") is None


def test_rules_file_is_valid_and_conditions_are_data_only() -> None:
    rules = compat.load_rules()
    assert rules[0].id == "mla-fp8-kv-sm12x"
    assert all(rule.citation for rule in rules)
    # A bare `#` in YAML starts a comment: every cited PR/issue number must survive.
    for rule in rules:
        assert not rule.citation.rstrip().endswith(("PR", "issue")), rule.id
        for word in ("PR", "issue"):
            assert f"{word} " not in rule.citation or f"{word} #" in rule.citation, rule.id
    facts = {"a": 3, "b": None}
    assert compat.evaluate({"fact": "a", "gt": 2}, facts)
    assert not compat.evaluate({"fact": "b", "gt": 2}, facts)
    assert compat.evaluate({"fact": "b", "eq": None}, facts)
    assert not compat.evaluate({"fact": "b", "ne": 0}, facts)
    assert compat.evaluate({"not": {"fact": "a", "in": [1, 2]}}, facts)
    with pytest.raises(compat.RuleError):
        compat.parse_rules(
            {
                "rules": [
                    {
                        "id": "x",
                        "severity": "incompatible",
                        "when": {"fact": "a", "eval": "__import__('os')"},
                        "reason": "r",
                        "fix": "f",
                        "citation": "c",
                    }
                ]
            }
        )
    assert compat.render("{a} and {a.__class__}", facts) == "3 and unknown"  # lookup only
