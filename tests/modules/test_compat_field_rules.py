"""check_serving_compat's field-2026 rules, one table row per rule (issue 32).

Real: the module, the rules file, the serve-spec reading, LocalConnection reading the model
configs. Recorded: the configs (the Kimi-K2.5-NVFP4 fixture; excerpts of public configs
below, each naming its source), the GPUs as the facts probe reports them (name, memory and
compute capability as NVML gives them for that card; `nvlink_links_up` as NVML's
nvmlDeviceGetNvLinkState counts them: 0 on the PCIe-only RTX PRO 6000, 18 on an HGX
B200/H200), and the vLLM build as the facts its probe reads (version, TRITON_MLA's FP8
support, the modules in vllm/v1/attention/backends/mla/). Nothing here is a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import probes
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext
from engine.probes import fileio
from engine.templating import all_true
from modules.checkpoints import check_serving_compat as mod
from modules.checkpoints import compat, servespec

ROOT = Path(__file__).resolve().parents[2]
KIMI = ROOT / "tests" / "fixtures" / "kimi-k2.5-nvfp4"

# deepseek-ai/DeepSeek-V3.2-Exp config.json (excerpt): MLA plus the lightning indexer.
DEEPSEEK_V32 = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "index_head_dim": 128,
    "index_n_heads": 64,
    "index_topk": 2048,
    "kv_lora_rank": 512,
    "n_routed_experts": 256,
    "num_attention_heads": 128,
    "num_hidden_layers": 61,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8"},
}
# openbmb/MiniCPM3-4B config.json (excerpt): MLA with qk_nope_head_dim 64.
MINICPM3 = {
    "architectures": ["MiniCPM3ForCausalLM"],
    "model_type": "minicpm3",
    "kv_lora_rank": 256,
    "num_attention_heads": 40,
    "num_hidden_layers": 62,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
}


def gpus(count: int, name: str, memory_mib: int, capability: str, nvlink: int | None) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "name": name,
            "memory_total_mib": memory_mib,
            "memory_used_mib": 3,
            "compute_capability": capability,
            "nvlink_links_up": nvlink,
            "processes": [],
        }
        for i in range(count)
    ]


RTX_PRO_6000 = gpus(8, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "12.0", 0)
RTX_PRO_6000_UNREAD = gpus(8, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "12.0", None)
B200 = gpus(8, "NVIDIA B200", 183359, "10.0", 18)
H200 = gpus(8, "NVIDIA H200", 143771, "9.0", 18)
A100 = gpus(8, "NVIDIA A100-SXM4-80GB", 81920, "8.0", 12)
# A vLLM build as its probe reads it: 0.32.0 with PR #34597 and PR #36322 and the SM120
# sparse backend (file names as in vllm-project/vllm vllm/v1/attention/backends/mla/).
NEW = {
    "vllm_version": "0.32.0",
    "triton_mla_fp8": True,
    "vllm_mla_backends": ["triton_mla", "flashinfer_fa2_mla", "flashinfer_mla_sparse_sm120", "flashmla"],
}
# 0.15.1: before PR #34597 (TRITON_MLA refuses FP8), no FA2 MLA, no SM120 sparse backend.
OLD = {"vllm_version": "0.15.1", "triton_mla_fp8": False, "vllm_mla_backends": ["triton_mla", "flashmla"]}


def model_dir(tmp_path: Path, config: dict[str, Any] | None) -> Path:
    if config is None:
        return KIMI
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def check(model: Path, gpu_list: list[dict[str, Any]], **args: Any) -> dict[str, Any]:
    conn = ScopedConnection(LocalConnection()).planning()
    ctx = TaskContext(host_name="localhost", conn=conn, facts={"gpus": gpu_list}, vars={})
    full = {key: spec.get("default") for key, spec in mod.SCHEMA["properties"].items()}
    full.update(model=str(model), tensor_parallel_size=8, fail_on="never", **args)
    result = mod.plan(ctx, full)
    data: dict[str, Any] = result.data
    return data


def severities(data: dict[str, Any]) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in data["findings"]}


# (row name, model config (None: the Kimi fixture), GPUs, args, {rule id: severity} that must
# be found, rule ids that must not be)
ROWS: list[tuple[str, dict[str, Any] | None, list[dict[str, Any]], dict[str, Any], dict[str, str], set[str]]] = [
    (
        "F1 new build keeps FP8 KV on SM120",
        None,
        RTX_PRO_6000,
        NEW,
        {"mla-fp8-kv-served-by-triton-mla": "info", "attention-backend-expected": "info"},
        {"mla-fp8-kv-sm12x", "mla-fp8-kv-sm12x-vllm-unknown"},
    ),
    (
        "F1 old build refuses FP8 KV on SM120",
        None,
        RTX_PRO_6000,
        OLD,
        {"mla-fp8-kv-sm12x": "incompatible"},
        {"mla-fp8-kv-served-by-triton-mla"},
    ),
    (
        "F4 SM10x backend forced on SM120",
        None,
        RTX_PRO_6000,
        {**NEW, "attention_backend": "FLASHINFER_MLA"},
        {"sm10x-mla-backend-on-sm12x": "incompatible"},
        set(),
    ),
    (
        "F4 CUTLASS_MLA through --attention-config.backend",
        None,
        RTX_PRO_6000,
        {**NEW, "extra_args": ["--attention-config.backend", "CUTLASS_MLA"]},
        {"sm10x-mla-backend-on-sm12x": "incompatible"},
        {"attention-backend-two-spellings"},
    ),
    (
        "F3 FA2 MLA with FP8 KV",
        None,
        RTX_PRO_6000,
        {**NEW, "attention_backend": "flashinfer_fa2_mla"},
        {"fa2-mla-fp8-kv": "incompatible"},
        {"fa2-mla-head-dim", "fa2-mla-not-in-build"},
    ),
    (
        "F3 FA2 MLA with qk_nope_head_dim 64",
        MINICPM3,
        RTX_PRO_6000,
        {**NEW, "attention_backend": "FLASHINFER_FA2_MLA"},
        {"fa2-mla-head-dim": "incompatible"},
        {"fa2-mla-fp8-kv"},
    ),
    (
        "F3 FA2 MLA forced where the build has none",
        MINICPM3,
        RTX_PRO_6000,
        {**OLD, "attention_backend": "FLASHINFER_FA2_MLA"},
        {"fa2-mla-not-in-build": "incompatible"},
        set(),
    ),
    (
        "F3 FA2 MLA forced on SM100",
        None,
        B200,
        {**NEW, "attention_backend": "FLASHINFER_FA2_MLA", "kv_cache_dtype": "auto"},
        {"fa2-mla-sm10x": "incompatible"},
        set(),
    ),
    (
        "F5 sparse MLA on SM120 without the SM120 sparse backend",
        DEEPSEEK_V32,
        RTX_PRO_6000,
        OLD,
        {"sparse-mla-sm12x-no-backend": "incompatible"},
        {"sparse-mla-sm12x-vllm-unknown"},
    ),
    (
        "F5 sparse MLA on SM120, backend present, default block size",
        DEEPSEEK_V32,
        RTX_PRO_6000,
        NEW,
        {"sparse-mla-sm12x-block-size": "warning"},
        {"sparse-mla-sm12x-no-backend"},
    ),
    (
        "F5 sparse MLA on SM120 at block size 128",
        DEEPSEEK_V32,
        RTX_PRO_6000,
        {**NEW, "block_size": 128},
        {},
        {"sparse-mla-sm12x-block-size", "sparse-mla-sm12x-no-backend"},
    ),
    (
        "F5 sparse MLA, MLA backends not read",
        DEEPSEEK_V32,
        RTX_PRO_6000,
        {"vllm_version": "0.32.0"},
        {"sparse-mla-sm12x-vllm-unknown": "warning"},
        set(),
    ),
    (
        "F6 fp8_ds_mla on a dense MLA model",
        None,
        RTX_PRO_6000,
        {**NEW, "kv_cache_dtype": "fp8_ds_mla"},
        {"fp8-ds-mla-on-dense-mla": "incompatible"},
        set(),
    ),
    (
        "F6 FP8 KV on SM 8.0",
        None,
        A100,
        NEW,
        {"fp8-kv-below-sm89": "incompatible", "nvfp4-marlin-fallback": "warning"},
        set(),
    ),
    (
        "F7 VLLM_ATTENTION_BACKEND ignored from 0.26",
        None,
        RTX_PRO_6000,
        {**NEW, "env": {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}},
        {"attention-backend-env-ignored": "warning"},
        {"attention-backend-env-deprecated"},
    ),
    (
        "F7 VLLM_ATTENTION_BACKEND deprecated before 0.26",
        None,
        H200,
        {**OLD, "vllm_version": "0.25.1", "env": {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}},
        {"attention-backend-env-deprecated": "warning"},
        {"attention-backend-env-ignored"},
    ),
    (
        "F7 both CLI spellings",
        None,
        RTX_PRO_6000,
        {**NEW, "attention_backend": "TRITON_MLA", "extra_args": ["--attention-config", '{"backend": "TRITON_MLA"}']},
        {"attention-backend-two-spellings": "incompatible"},
        set(),
    ),
    (
        "F8 bf16 override on an FP8 checkpoint",
        None,
        RTX_PRO_6000,
        {**NEW, "kv_cache_dtype": "bfloat16"},
        {"kv-dtype-override-vs-checkpoint-fp8": "incompatible"},
        {"mla-fp8-kv-served-by-triton-mla"},
    ),
    (
        "F9 NVFP4 MoE on SM120 with expert parallel",
        None,
        RTX_PRO_6000,
        {**NEW, "enable_expert_parallel": True},
        {"nvfp4-moe-sm12x-golden-output": "warning", "nvfp4-ep-sm12x": "warning"},
        set(),
    ),
    (
        "F10 NVLink all2all on PCIe-only GPUs",
        None,
        RTX_PRO_6000,
        {**NEW, "all2all_backend": "deepep_low_latency"},
        {"all2all-needs-nvlink": "incompatible"},
        {"all2all-nvlink-unknown"},
    ),
    (
        "F10 NVLink all2all where NVLink is up",
        None,
        B200,
        {**NEW, "all2all_backend": "flashinfer_nvlink_one_sided"},
        {},
        {"all2all-needs-nvlink", "all2all-nvlink-unknown"},
    ),
    (
        "F10 NVLink all2all, NVLink state not read",
        None,
        RTX_PRO_6000_UNREAD,
        {**NEW, "all2all_backend": "deepep_high_throughput"},
        {"all2all-nvlink-unknown": "warning"},
        {"all2all-needs-nvlink", "pcie-nccl-p2p-hang"},
    ),
    (
        "F11 PCIe-only TP 8: P2P hang risk and custom all-reduce off",
        None,
        RTX_PRO_6000,
        NEW,
        {"pcie-nccl-p2p-hang": "warning", "pcie-custom-allreduce-off": "info"},
        set(),
    ),
    (
        "F11 PCIe-only with NCCL_P2P_DISABLE=1",
        None,
        RTX_PRO_6000,
        {**NEW, "env": {"NCCL_P2P_DISABLE": "1"}},
        {"pcie-custom-allreduce-off": "info"},
        {"pcie-nccl-p2p-hang"},
    ),
    (
        "F11 NVLink host has no PCIe findings",
        None,
        B200,
        NEW,
        {},
        {"pcie-nccl-p2p-hang", "pcie-custom-allreduce-off", "nvfp4-moe-sm12x-golden-output"},
    ),
    (
        "F12 KV offload with an MLA model",
        None,
        RTX_PRO_6000,
        {**NEW, "extra_args": ["--kv-offloading-backend", "native", "--kv-offloading-size", "64"]},
        {"kv-offload-mla-unverified": "warning"},
        set(),
    ),
    (
        "DCP must divide TP",
        None,
        RTX_PRO_6000,
        {**NEW, "decode_context_parallel_size": 3},
        {"dcp-not-dividing-tp": "incompatible"},
        set(),
    ),
    (
        "TP x PP beyond the GPUs",
        None,
        RTX_PRO_6000,
        {**NEW, "pipeline_parallel_size": 2},
        {"tp-exceeds-gpu-count": "incompatible"},
        set(),
    ),
]


@pytest.mark.parametrize(
    ("config", "gpu_list", "args", "found", "absent"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS]
)
def test_rule_table(
    tmp_path: Path,
    config: dict[str, Any] | None,
    gpu_list: list[dict[str, Any]],
    args: dict[str, Any],
    found: dict[str, str],
    absent: set[str],
) -> None:
    data = check(model_dir(tmp_path, config), gpu_list, **args)
    got = severities(data)
    for rule_id, severity in found.items():
        assert got.get(rule_id) == severity, (rule_id, got)
    assert not absent & set(got), (absent & set(got), got)
    incompatible = any(s == "incompatible" for s in got.values())
    assert data["compatible"] is (False if incompatible else (None if data["cannot_tell"] else True))
    for finding in data["findings"]:
        assert finding["versions"] and finding["citation"] and finding["fix"], finding["id"]


BACKENDS = [
    ("Kimi FP8 KV on SM120, new build", None, RTX_PRO_6000, NEW, {}, "TRITON_MLA"),
    ("Kimi FP8 KV on SM120, old build: none", None, RTX_PRO_6000, OLD, {}, None),
    (
        "Kimi BF16 override on SM120 with FA2 MLA",
        None,
        RTX_PRO_6000,
        NEW,
        {"kv_cache_dtype": "bfloat16"},
        "FLASHINFER_FA2_MLA",
    ),
    (
        "Kimi BF16 on SM120, build without FA2 MLA",
        None,
        RTX_PRO_6000,
        OLD,
        {"kv_cache_dtype": "bfloat16"},
        "TRITON_MLA",
    ),
    ("MiniCPM3 BF16 on SM120: head dim 64, no FA2", MINICPM3, RTX_PRO_6000, NEW, {}, "TRITON_MLA"),
    ("Kimi on SM100", None, B200, NEW, {}, "FLASHINFER_MLA"),
    ("Kimi BF16 on SM90", None, H200, NEW, {"kv_cache_dtype": "bfloat16"}, "FLASH_ATTN_MLA"),
    ("Kimi BF16 on SM80", None, A100, NEW, {"kv_cache_dtype": "bfloat16"}, "TRITON_MLA"),
    ("DeepSeek-V3.2 on SM120", DEEPSEEK_V32, RTX_PRO_6000, NEW, {}, "FLASHINFER_MLA_SPARSE_SM120"),
    ("declared backend wins", None, RTX_PRO_6000, NEW, {"attention_backend": "triton_mla"}, "TRITON_MLA"),
    (
        "env backend honoured before 0.26",
        None,
        H200,
        {**NEW, "vllm_version": "0.25.1"},
        {"env": {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}},
        "TRITON_MLA",
    ),
    (
        "env backend ignored from 0.26",
        None,
        H200,
        NEW,
        {"env": {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, "kv_cache_dtype": "bfloat16"},
        "FLASH_ATTN_MLA",
    ),
]


@pytest.mark.parametrize(
    ("config", "gpu_list", "build", "args", "backend"), [row[1:] for row in BACKENDS], ids=[row[0] for row in BACKENDS]
)
def test_expected_attention_backend(
    tmp_path: Path,
    config: dict[str, Any] | None,
    gpu_list: list[dict[str, Any]],
    build: dict[str, Any],
    args: dict[str, Any],
    backend: str | None,
) -> None:
    data = check(model_dir(tmp_path, config), gpu_list, **{**build, **args})
    assert data["attention_backend"] == backend, data["attention_backend_why"]


def test_an_unreadable_build_is_cannot_tell_never_compatible() -> None:
    data = check(KIMI, H200, vllm_python="/nonexistent/python3")
    assert data["compatible"] is None
    assert "vLLM build could not be read" in data["cannot_tell"][0]


def test_a_build_whose_mla_parts_were_not_read_is_cannot_tell_where_they_decide(tmp_path: Path) -> None:
    """A version alone does not say whether TRITON_MLA takes FP8 or the SM120 sparse
    backend is there: where the verdict hangs on it, "cannot tell", never "compatible"."""
    fp8 = check(KIMI, RTX_PRO_6000, vllm_version="0.32.0")
    assert fp8["compatible"] is None and "TRITON_MLA takes an FP8 KV cache" in fp8["cannot_tell"][0]
    sparse = check(model_dir(tmp_path, DEEPSEEK_V32), RTX_PRO_6000, vllm_version="0.32.0", triton_mla_fp8=True)
    assert sparse["compatible"] is None and "sparse MLA backend" in sparse["cannot_tell"][0]
    # where it does not decide (SM 9.0), the version is enough
    assert check(KIMI, H200, vllm_version="0.32.0")["compatible"] is True


def test_kv_capacity_prediction_follows_dtype_and_dcp() -> None:
    """Kimi-K2.5: 61 layers of (512 + 64) latent values a token; FP8 is 1 byte a value."""
    fp8 = check(KIMI, RTX_PRO_6000, **NEW)["predicted_kv_tokens"]
    per_gpu = (
        97887 * 2**20 * 0.9
        - json.loads((KIMI / "model.safetensors.index.json").read_text())["metadata"]["total_size"] / 8
    )
    assert fp8 == int(per_gpu // (576 * 61))
    bf16 = check(KIMI, RTX_PRO_6000, **NEW, kv_cache_dtype="bfloat16")["predicted_kv_tokens"]
    assert abs(bf16 * 2 - fp8) <= 2  # stripping FP8 KV halves the capacity
    dcp4 = check(KIMI, RTX_PRO_6000, **NEW, decode_context_parallel_size=4)["predicted_kv_tokens"]
    assert dcp4 == fp8 * 4


def test_release_reads_pre_and_local_versions() -> None:
    assert servespec.release("0.32.0rc1+cu129") == [0, 32, 0]
    assert servespec.release("0.26") == [0, 26, 0]
    assert servespec.release("unknown") is None


def test_every_rule_names_the_vllm_versions_it_is_about() -> None:
    assert all(rule.versions for rule in compat.load_rules())


def test_probe_lists_the_builds_mla_backend_modules(tmp_path: Path) -> None:
    """The probe's directory reader on a tree shaped like vLLM's
    vllm/v1/attention/backends/mla/ (file names from vllm-project/vllm)."""
    namespace: dict[str, Any] = {"call": lambda name, args: {"fileio": fileio.main}[name](args)}
    exec((ROOT / "modules" / "checkpoints" / "probes" / "model_vllm_info.py").read_text(), namespace)
    (tmp_path / "prefill").mkdir()
    (tmp_path / "prefill" / "flash_attn.py").write_text("")  # a sub-package's module is not a backend
    for name in (
        "__init__.py",
        "triton_mla.py",
        "flashinfer_fa2_mla.py",
        "flashinfer_mla_sparse_sm120.py",
        "common.py",
    ):
        (tmp_path / name).write_text("")
    assert namespace["_mla_backends"](str(tmp_path)) == [
        "common",
        "flashinfer_fa2_mla",
        "flashinfer_mla_sparse_sm120",
        "triton_mla",
    ]
    assert namespace["_mla_backends"](str(tmp_path / "absent")) is None


def _playbook_condition(task_name: str) -> str:
    book = yaml.safe_load((ROOT / "playbooks" / "kimi_k25_nvfp4.yml").read_text())
    task = next(t for t in book[0]["tasks"] if t["name"] == task_name)
    return str(task["when"])


@pytest.mark.parametrize(
    ("build", "strips"),
    [(NEW, False), (OLD, True), ({"vllm_python": "/nonexistent/python3"}, True)],
    ids=["0.32 keeps FP8 KV", "before PR 34597 strips it", "build unreadable strips it"],
)
def test_the_kimi_playbook_strips_fp8_kv_only_where_the_build_cannot_serve_it(
    build: dict[str, Any], strips: bool
) -> None:
    """The playbook's own `when` (real templating) on the checker's real answer."""
    compat_data = check(KIMI, RTX_PRO_6000, **build)
    condition = _playbook_condition("FP8 KV cache removed from the checkpoint (only where the GPUs need it)")
    assert all_true((condition,), {"compat": compat_data}) is strips
    if not strips:
        kept = next(f for f in compat_data["findings"] if f["id"] == "mla-fp8-kv-served-by-triton-mla")
        assert "keep the checkpoint's calibrated FP8 KV cache" in kept["fix"]


def test_the_probe_program_reads_a_build_laid_out_like_vllms(tmp_path: Path) -> None:
    """The real probe program, run by a separate python as over SSH, on a site directory
    laid out like an installed vLLM: a vllm-0.32.0.dist-info and the MLA backend modules
    (names from vllm-project/vllm), TRITON_MLA's dtype list as PR #34597 left it."""
    site = tmp_path / "site"
    mla = site / "vllm" / "v1" / "attention" / "backends" / "mla"
    mla.mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    dist = site / "vllm-0.32.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    (mla / "triton_mla.py").write_text(
        'class TritonMLABackend:\n    supported_kv_cache_dtypes = ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3"]\n'
    )
    for name in ("flashinfer_fa2_mla.py", "flashinfer_mla_sparse_sm120.py", "__init__.py"):
        (mla / name).write_text("")
    done = subprocess.run(
        [sys.executable, "-c", probes.program("model_vllm_info")],
        input="{}",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    answer = probes.parse_output("model_vllm_info", done.stdout, done.stderr)
    assert answer["version"] == "0.32.0" and answer["triton_mla_fp8"] is True
    assert answer["mla_backends"] == ["flashinfer_fa2_mla", "flashinfer_mla_sparse_sm120", "triton_mla"]
