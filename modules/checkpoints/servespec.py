"""What the declared serve spec means to vLLM (pure functions, no I/O).

From the check's arguments (attention backend, all2all backend, parallel sizes, env, extra
args) and the model / GPU / vLLM facts: the ``serve.*`` facts the rules read, the MLA
attention backend vLLM will pick, and the KV-cache capacity it should log.

The backend choice follows vLLM's own order (vllm/platforms/cuda.py
``_get_backend_priorities``: SM 10.x starts with FLASHINFER_MLA, other GPUs with
FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA) and each backend's limits
(``supports_compute_capability``, ``supported_kv_cache_dtypes``): on SM 12.x only
FLASHINFER_FA2_MLA (BF16 KV, ``qk_nope_head_dim == 128``, vLLM PR #36322) and TRITON_MLA
(FP8 KV since PR #34597) have kernels, and sparse MLA needs FLASHINFER_MLA_SPARSE_SM120.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

# all2all backends that move tokens over NVLink or GPU-initiated RDMA (IBGDA): nothing to
# carry them on a PCIe-only host (docs.vllm.ai serving/expert_parallel_deployment).
NVLINK_ALL2ALL_PREFIXES = ("deepep_", "flashinfer_nvlink")
# vLLM PR #26315 deprecated VLLM_ATTENTION_BACKEND; 0.26.0 ignores it (vllm#50292).
ENV_BACKEND_IGNORED_FROM = (0, 26)
BACKEND_FLAGS = ("--attention-backend", "--attention-config.backend")
OFFLOAD_FLAGS = ("--kv-offloading-backend", "--kv-offloading-size")
_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def release(version: str | None) -> list[int] | None:
    """``0.32.0rc1+cu129`` -> [0, 32, 0]: a list, so rules compare it with ``ge: [0, 26]``."""
    match = _RELEASE.match(version or "")
    if not match:
        return None
    return [int(part) for part in match.groups(default="0")]


def _flag_value(extra_args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(extra_args):
        if arg == flag and i + 1 < len(extra_args):
            return extra_args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _config_backend(extra_args: Sequence[str]) -> str | None:
    """``--attention-config '{"backend": "TRITON_MLA"}'``: the JSON spelling of the same flag."""
    text = _flag_value(extra_args, "--attention-config")
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        return None
    return str(parsed["backend"]) if isinstance(parsed, dict) and parsed.get("backend") else None


def attention_spellings(args: Mapping[str, Any]) -> dict[str, str]:
    """Each CLI spelling of the attention backend the spec uses -> its value.
    ``attention_backend`` becomes ``--attention-backend`` (modules/serving/spec.py)."""
    extra = [str(arg) for arg in args.get("extra_args") or ()]
    found: dict[str, str] = {}
    if args.get("attention_backend"):
        found["--attention-backend"] = str(args["attention_backend"])
    for flag in BACKEND_FLAGS:
        value = _flag_value(extra, flag)
        if value:
            found.setdefault(flag, value)
    config = _config_backend(extra)
    if config:
        found.setdefault("--attention-config.backend", config)
    return found


def _offloading(args: Mapping[str, Any]) -> bool:
    extra = [str(arg) for arg in args.get("extra_args") or ()]
    if args.get("kv_offloading_backend") or any(_flag_value(extra, flag) for flag in OFFLOAD_FLAGS):
        return True
    transfer = _flag_value(extra, "--kv-transfer-config") or ""
    return "OffloadingConnector" in transfer or "LMCache" in transfer


def spec_facts(args: Mapping[str, Any], vllm_release: list[int] | None) -> dict[str, Any]:
    env = {str(k): str(v) for k, v in (args.get("env") or {}).items()}
    spellings = attention_spellings(args)
    env_backend = env.get("VLLM_ATTENTION_BACKEND")
    env_honoured = env_backend is not None and (vllm_release is None or vllm_release < list(ENV_BACKEND_IGNORED_FROM))
    declared = next(iter(spellings.values()), None)
    all2all = args.get("all2all_backend")
    tp, pp = int(args.get("tensor_parallel_size") or 1), int(args.get("pipeline_parallel_size") or 1)
    dcp = int(args.get("decode_context_parallel_size") or 1)
    return {
        "serve.pipeline_parallel_size": pp,
        "serve.decode_context_parallel_size": dcp,
        "serve.world_size": tp * pp,
        "serve.dcp_remainder": tp % dcp,
        "serve.attention_backend": declared.upper() if declared else None,
        "serve.attention_backend_spellings": len(spellings),
        "serve.attention_backend_flags": ", ".join(sorted(spellings)) or None,
        "serve.env_attention_backend": env_backend,
        "serve.forced_attention_backend": (declared or (env_backend if env_honoured else None) or "").upper() or None,
        "serve.all2all_backend": all2all,
        "serve.all2all_needs_nvlink": bool(all2all) and str(all2all).startswith(NVLINK_ALL2ALL_PREFIXES),
        "serve.enable_expert_parallel": bool(args.get("enable_expert_parallel")),
        "serve.block_size": args.get("block_size"),
        "serve.nccl_p2p_disabled": env.get("NCCL_P2P_DISABLE") == "1",
        "serve.kv_offloading": _offloading(args),
    }


def _sparse_backend(f: Mapping[str, Any], major: int) -> tuple[str | None, str]:
    if major == 12:
        if f.get("vllm.has_sm120_sparse_mla") is False:
            return None, "sparse MLA on SM 12.x and this vLLM has no SM120 sparse backend"
        return "FLASHINFER_MLA_SPARSE_SM120", "the SM120 sparse MLA backend (needs the fp8_ds_mla KV layout)"
    if major == 10:
        return "FLASHINFER_MLA_SPARSE", "vLLM's first sparse MLA backend on SM 10.x"
    return "FLASHMLA_SPARSE", "vLLM's sparse MLA backend on SM 9.x"


def _sm12x_dense(f: Mapping[str, Any]) -> tuple[str | None, str]:
    if f.get("model.kv_cache_fp8"):
        served = f.get("vllm.triton_mla_fp8")
        if served is False:
            return None, "no SM 12.x MLA backend takes an FP8 KV cache in this vLLM (before PR #34597)"
        why = "the only SM 12.x MLA backend with FP8 KV (PR #34597)"
        return "TRITON_MLA", why if served else why + "; cannot tell whether this build has it"
    if f.get("vllm.has_fa2_mla") and f.get("model.qk_nope_head_dim") == 128:
        return "FLASHINFER_FA2_MLA", "BF16 KV and qk_nope_head_dim 128: FA2 MLA comes before TRITON_MLA"
    return "TRITON_MLA", "the SM 12.x MLA backend for this KV dtype and build"


def expected_backend(f: Mapping[str, Any]) -> tuple[str | None, str]:
    """(the MLA backend vLLM will pick, why); (None, why) when none or not MLA."""
    if not f.get("model.is_mla"):
        return None, "not an MLA model (vLLM picks a standard attention backend)"
    if f.get("serve.forced_attention_backend"):
        return f["serve.forced_attention_backend"], "declared in the serve spec (vLLM refuses it if it is not valid)"
    capability = f.get("gpu.capability")
    if not capability:
        return None, "the GPUs' compute capability is unknown"
    major = capability[0]
    if f.get("model.is_sparse_mla"):
        return _sparse_backend(f, major)
    if major == 12:
        return _sm12x_dense(f)
    if major == 10:
        return "FLASHINFER_MLA", "first in vLLM's SM 10.x MLA order"
    if major == 9:
        if f.get("model.kv_cache_fp8"):
            return "FLASHMLA", "FLASH_ATTN_MLA takes no FP8 KV cache; FlashMLA does on SM 9.x"
        return "FLASH_ATTN_MLA", "first in vLLM's MLA order on SM 9.x"
    return "TRITON_MLA", f"no FlashAttention/FlashMLA/FlashInfer MLA kernels on SM {major}.x"


def _kv_bytes_per_element(dtype: str | None) -> float:
    if dtype == "fp8_ds_mla":
        return 656 / 576  # vLLM's packed layout: 656 B per token per layer (vllm#52202)
    return 1.0 if dtype and dtype.startswith("fp8") else 2.0


def predicted_kv_tokens(f: Mapping[str, Any]) -> int | None:
    """The tokens vLLM's "GPU KV cache size: N tokens" line should be near: per-GPU memory x
    gpu_memory_utilization less the GPU's share of the weights, over the KV bytes one token
    takes on one GPU. An upper bound: activations and CUDA graphs are not subtracted.
    MLA's latent KV (kv_lora_rank + qk_rope_head_dim) is the same on every TP rank, so only
    pipeline stages split layers and decode context parallel multiplies the tokens."""
    mib, weights, layers = f.get("gpu.min_memory_mib"), f.get("model.weights_bytes"), f.get("model.num_layers")
    if not (mib and weights and isinstance(layers, int)):
        return None
    tp, pp = f["serve.tensor_parallel_size"], f["serve.pipeline_parallel_size"]
    free = mib * 2**20 * f["serve.gpu_memory_utilization"] - weights / (tp * pp)
    per_element = _kv_bytes_per_element(f.get("model.kv_cache_dtype") if f.get("model.kv_cache_fp8") else None)
    stage_layers = -(-layers // pp)
    if f.get("model.is_mla"):
        width = (f.get("model.kv_lora_rank") or 0) + (f.get("model.qk_rope_head_dim") or 0)
        tokens_scale = f["serve.decode_context_parallel_size"]
    else:
        heads, head_dim = f.get("model.kv_heads") or f.get("model.attention_heads"), f.get("model.head_dim")
        if not (isinstance(heads, int) and isinstance(head_dim, int)):
            return None
        width, tokens_scale = 2 * -(-heads // tp) * head_dim, 1
    per_token = width * per_element * stage_layers
    if free <= 0 or per_token <= 0:
        return 0 if free <= 0 else None
    return int(free // per_token) * int(tokens_scale)
