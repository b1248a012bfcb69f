"""What a checkpoint's config files say about serving it (pure functions, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modules.checkpoints.compat import GIB

KV_KEYS = ("kv_cache_scheme", "kv_cache_quant_algo")
# An MoE config names its routed experts one of these ways (DeepSeek/Kimi, Qwen/Mixtral).
MOE_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
# Sparse MLA (DeepSeek-V3.2/V4, GLM-5 DSA) adds a lightning indexer: vLLM's
# is_deepseek_v32-style checks look for index_topk (vllm/transformers_utils/config.py).
SPARSE_KEYS = ("index_topk", "index_n_heads", "index_head_dim")


def _section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _first(config: Mapping[str, Any], key: str) -> Any:
    value = _section(config).get(key)
    return config.get(key) if value is None else value


def _head_dim(config: Mapping[str, Any]) -> int | None:
    explicit = _first(config, "head_dim")
    if isinstance(explicit, int):
        return explicit
    hidden, heads = _first(config, "hidden_size"), _first(config, "num_attention_heads")
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None


def kv_dtype_of(declared: Any) -> str | None:
    """vLLM's reading of a KV declaration: a float/8-bit scheme or "FP8" is fp8."""
    if isinstance(declared, dict):
        if declared.get("type") == "float" and declared.get("num_bits") == 8:
            return "fp8"
        return "unknown"
    if isinstance(declared, str) and declared:
        return declared.lower()
    return None


def _quant_blocks(config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None) -> list[tuple[str, Mapping[str, Any]]]:
    """The quantization blocks vLLM acts on: config.json's, else hf_quant_config.json's."""
    blocks: list[tuple[str, Mapping[str, Any]]] = []
    for where, holder in (("", config), ("text_config.", config.get("text_config"))):
        block = holder.get("quantization_config") if isinstance(holder, dict) else None
        if isinstance(block, dict):
            blocks.append((f"config.json {where}quantization_config", block))
    if not blocks and hf_quant and isinstance(hf_quant.get("quantization"), dict):
        blocks.append(("hf_quant_config.json quantization", hf_quant["quantization"]))
    return blocks


def _kv_declaration(blocks: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str | None, str]:
    for where, block in blocks:
        for key in KV_KEYS:
            dtype = kv_dtype_of(block.get(key))
            if dtype is not None:
                return dtype, f"{where}.{key}"
    return None, ""


def model_facts(
    config: Mapping[str, Any], hf_quant: Mapping[str, Any] | None, index: Mapping[str, Any] | None
) -> dict[str, Any]:
    blocks = _quant_blocks(config, hf_quant)
    kv_dtype, kv_source = _kv_declaration(blocks)
    quant = blocks[0][1] if blocks else {}
    kv_lora_rank = _first(config, "kv_lora_rank")
    total = (index or {}).get("metadata", {}).get("total_size")
    weights = int(total) if isinstance(total, int | float) else None
    architectures = config.get("architectures") or [None]
    quant_algo = quant.get("quant_algo")
    return {
        "model.architecture": architectures[0],
        "model.model_type": config.get("model_type"),
        "model.text_model_type": _section(config).get("model_type"),
        "model.kv_lora_rank": kv_lora_rank,
        "model.is_mla": isinstance(kv_lora_rank, int) and not isinstance(kv_lora_rank, bool),
        "model.attention_heads": _first(config, "num_attention_heads"),
        "model.quant_method": quant.get("quant_method") or ("modelopt" if hf_quant else None),
        "model.quant_algo": quant_algo,
        "model.is_nvfp4": "NVFP4" in str(quant_algo or "").upper(),
        "model.is_moe": any(_first(config, key) for key in MOE_KEYS),
        "model.is_sparse_mla": isinstance(kv_lora_rank, int)
        and any(_first(config, k) is not None for k in SPARSE_KEYS),
        "model.qk_nope_head_dim": _first(config, "qk_nope_head_dim"),
        "model.qk_rope_head_dim": _first(config, "qk_rope_head_dim"),
        "model.num_layers": _first(config, "num_hidden_layers"),
        "model.kv_heads": _first(config, "num_key_value_heads"),
        "model.head_dim": _head_dim(config),
        "model.kv_cache_dtype": kv_dtype,
        "model.kv_cache_fp8": bool(kv_dtype and kv_dtype.startswith("fp8")),
        "model.checkpoint_kv_cache_fp8": bool(kv_dtype and kv_dtype.startswith("fp8")),
        "model.kv_cache_source": kv_source,
        "model.weights_bytes": weights,
        "model.weights_gib": None if weights is None else round(weights / GIB, 1),
    }


def _capability(gpu: Mapping[str, Any]) -> tuple[int, int] | None:
    text = str(gpu.get("compute_capability") or "")
    major, _, minor = text.partition(".")
    if not major.isdigit():
        return None
    return int(major), int(minor) if minor.isdigit() else 0


def gpu_facts(gpus: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    caps = [cap for gpu in gpus if (cap := _capability(gpu)) is not None]
    memories = [gpu["memory_total_mib"] for gpu in gpus if gpu.get("memory_total_mib")]
    lowest = min(caps) if caps else None
    min_mib = min(memories) if memories else None
    links = [gpu.get("nvlink_links_up") for gpu in gpus]
    known = [n for n in links if isinstance(n, int)]
    return {
        "gpu.capability": None if lowest is None else list(lowest),
        # NVML's NVLink state per GPU (ensure_gpus_healthy's topology reading): every GPU read
        # and none with a link up is PCIe-only; a GPU not read leaves it unknown (null).
        "gpu.nvlink_links_min": min(known) if known and len(known) == len(links) else None,
        "gpu.pcie_only": (not any(known)) if gpus and len(known) == len(links) else None,
        "gpu.count": len(gpus),
        "gpu.names": sorted({str(gpu.get("name")) for gpu in gpus}),
        "gpu.sm": None if lowest is None else f"{lowest[0]}.{lowest[1]}",
        "gpu.sm_major": None if lowest is None else lowest[0],
        "gpu.min_memory_mib": min_mib,
        "gpu.min_memory_gib": None if min_mib is None else round(min_mib / 1024, 1),
    }


def serve_facts(
    model: Mapping[str, Any],
    gpu: Mapping[str, Any],
    tensor_parallel_size: int,
    gpu_memory_utilization: float,
    kv_cache_dtype: str,
) -> dict[str, Any]:
    usable = None
    if gpu["gpu.min_memory_mib"]:
        usable = int(gpu["gpu.min_memory_mib"] * 2**20 * tensor_parallel_size * gpu_memory_utilization)
    weights = model["model.weights_bytes"]
    fraction = weights / usable if usable and weights is not None else None
    heads = model["model.attention_heads"]
    return {
        "serve.tensor_parallel_size": tensor_parallel_size,
        "serve.gpu_memory_utilization": gpu_memory_utilization,
        "serve.kv_cache_dtype": kv_cache_dtype,
        "serve.usable_bytes": usable,
        "serve.usable_gib": None if usable is None else round(usable / GIB, 1),
        "serve.weights_fraction": fraction,
        "serve.weights_percent": None if fraction is None else round(100 * fraction),
        "serve.heads_remainder": heads % tensor_parallel_size if isinstance(heads, int) else None,
    }


def effective_kv(model: Mapping[str, Any], kv_cache_dtype: str) -> dict[str, Any]:
    """``--kv-cache-dtype auto`` takes the checkpoint's; anything else overrides it."""
    if kv_cache_dtype == "auto":
        return {}
    return {
        "model.kv_cache_dtype": kv_cache_dtype,
        "model.kv_cache_fp8": kv_cache_dtype.startswith("fp8"),
        "model.kv_cache_source": f"kv_cache_dtype: {kv_cache_dtype}",
    }
