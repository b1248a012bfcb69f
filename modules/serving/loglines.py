"""What vLLM's log lines say, beyond "it failed": the named cause and fix of a fatal line,
and the facts a start logs (the attention and MoE backends it chose, the KV cache size,
the all-reduce it gave up on, the compile / autotune caches it reused).

Pure functions over text, tested on recorded log lines (tests/modules/vllm_logs/). Each
pattern names its public source: the vLLM source, or the issue where the line was logged
(the domain notes, field-2026: "Log lines an automated checker should know").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# A logged KV cache this far below the checker's prediction means the launch does not
# match what was planned (the rtx6kpro Kimi recipe: "If the reported cache size is far
# lower than these numbers, the launch configuration is not matching"). The prediction is
# an upper bound (activations and CUDA graphs are not subtracted), hence half.
KV_FAR_BELOW = 0.5


@dataclass(frozen=True)
class Cause:
    name: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    source: str

    def explain(self, line: str) -> str:
        return f"{self.name}: {self.cause}; fix: {self.fix} (source: {self.source})"


_FP8_STRIP = "remove the checkpoint's FP8 KV declaration (patch_quant_config kv_cache_dtype: auto)"

# Fatal lines, most specific first: the first cause whose pattern matches explains the line.
CAUSES = (
    Cause(
        "triton-mla-fp8-kv",
        re.compile(r"TritonMLA V1 with FP8 KV cache not yet supported|FP8 Triton MLA not yet supported"),
        "this vLLM's TRITON_MLA (the only MLA backend on SM 12.x) refuses an FP8 KV cache",
        f"install a vLLM with PR #34597 (it serves FP8 KV: keep the checkpoint's), or {_FP8_STRIP}",
        "vllm-project/vllm issue #35577, PR #34597",
    ),
    Cause(
        "selected-backend-invalid",
        re.compile(r"Selected backend (\S+) is not valid for this configuration"),
        "the declared attention backend has no kernel for this GPU, KV dtype or model",
        "drop attention_backend (vLLM picks) or declare one the GPU has (TRITON_MLA on SM 12.x)",
        "vllm-project/vllm vllm/platforms/cuda.py get_attn_backend_cls",
    ),
    Cause(
        "kv-dtype-override-vs-checkpoint",
        re.compile(r"Unsupported data type of kv cache"),
        "an explicit --kv-cache-dtype was given for a checkpoint that declares an FP8 KV cache",
        f"serve with kv_cache_dtype auto and {_FP8_STRIP}",
        "vllm-project/vllm issue #34752, PR #35044",
    ),
    Cause(
        "fp8-below-sm89",
        re.compile(r"type fp8e4nv not supported in this architecture"),
        "FP8 needs SM 8.9 or later; this GPU has no native FP8",
        f"serve a BF16 KV cache: {_FP8_STRIP}",
        "vllm-project/vllm issues #26431, #40851; PR #47060",
    ),
    Cause(
        "sm10x-kernel-on-sm12x",
        # tvm.error.InternalError from FlashInfer's trtllm-gen runner; only an error line
        re.compile(r"Error\S*:.*Unsupported architecture"),
        "an SM 10.x-only kernel (FlashInfer trtllm-gen MLA) was chosen on an SM 12.x GPU",
        "do not declare FLASHINFER_MLA / CUTLASS_MLA on SM 12.x; declare TRITON_MLA or let vLLM pick",
        "flashinfer-ai/flashinfer issue #5290; sgl-project/sglang issue #24633",
    ),
    Cause(
        "kv-cache-below-max-model-len",
        re.compile(r"KV cache is needed, which is larger than the available KV cache memory"),
        "one request of max_model_len tokens does not fit in the KV cache left after the weights",
        "lower max_model_len, raise gpu_memory_utilization, use more GPUs, or keep an FP8 KV cache",
        "vllm-project/vllm issue #15871",
    ),
    Cause(
        "cuda-out-of-memory",
        re.compile(r"CUDA out of memory|torch\.OutOfMemoryError"),
        "a GPU ran out of memory (another process holding memory, or the layout does not fit)",
        "ensure_gpus_idle first; lower gpu_memory_utilization or max_num_seqs, or use more GPUs",
        "vLLM log (torch.OutOfMemoryError)",
    ),
    Cause(
        "shm-full",
        re.compile(r"Insufficient space in /dev/shm"),
        "/dev/shm is full (segments leaked by an earlier crash)",
        "ensure_shm_clean before the start",
        "vLLM log (RuntimeError: Insufficient space in /dev/shm)",
    ),
)
# "No valid attention backend found ... Reasons: {FLASH_ATTN_MLA: [...], TRITON_MLA: [...]}"
# (no closing brace needed: a quoted line may have been cut at its end)
_NO_BACKEND = re.compile(r"No valid attention backend found.*?Reasons: \{(.*)")
_REASON = re.compile(r"(\w+): \[([^\]]*)\]")
_NO_BACKEND_FIXES = (
    ("kv_cache_dtype not supported", f"the KV dtype: install a vLLM with PR #34597, or {_FP8_STRIP}"),
    ("sparse not supported", "sparse MLA: install a vLLM with the SM120 sparse backend (0.28 on)"),
    ("compute capability not supported", "the GPU: no backend has kernels for it"),
)


def _no_backend(line: str) -> str | None:
    """The per-backend reasons of "No valid attention backend" (vllm#31936), and the fix
    for the reason that rules out the backend that would otherwise serve."""
    match = _NO_BACKEND.search(line)
    if not match:
        return None
    reasons = {name: text for name, text in _REASON.findall(match.group(1))}
    said = "; ".join(f"{name}: {text}" for name, text in reasons.items()) or match.group(1)
    fixes = [fix for needle, fix in _NO_BACKEND_FIXES if any(needle in text for text in reasons.values())]
    fix = fixes[0] if fixes else "change the KV dtype or the attention backend"
    return (
        f"no-valid-attention-backend: no attention backend takes this configuration ({said}); "
        f"fix {fix} (source: vllm-project/vllm issue #31936)"
    )


def explain(lines: Iterable[str]) -> str | None:
    """The named cause and fix of the first line a known cause explains, or None."""
    for line in lines:
        told = _no_backend(line)
        if told:
            return told
        for cause in CAUSES:
            if cause.pattern.search(line):
                return cause.explain(line)
    return None


def fatal_patterns() -> tuple[re.Pattern[str], ...]:
    return (*(cause.pattern for cause in CAUSES), _NO_BACKEND)


# ---- facts ------------------------------------------------------------------------------


def _int(text: str) -> int:
    return int(text.replace(",", ""))


# (fact, pattern, how the match becomes the value). The latest line wins, except where a
# fact is a flag (True once seen).
_FACTS: tuple[tuple[str, re.Pattern[str], Any], ...] = (
    # vllm/platforms/cuda.py: "Using %s attention backend out of potential backends: %s"
    ("attention_backend", re.compile(r"Using '?([A-Z][A-Z0-9_]+)'? attention backend out of potential"), str),
    # vllm#31085 comment: "Using 'FLASHINFER_B12X' NvFp4 MoE backend out of potential backends"
    ("moe_backend", re.compile(r"Using '([A-Z][A-Z0-9_]+)' (?:NvFp4 )?MoE backend"), str),
    ("fp4_marlin_fallback", re.compile(r"Your GPU does not have native support for FP4 computation"), bool),
    # vllm/v1/core/kv_cache_utils.py: "GPU KV cache size: 512,192 tokens" (the CPU build
    # logs "CPU KV cache size", with the concurrency on the same line)
    ("kv_cache_tokens", re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens"), _int),
    ("max_concurrency", re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"), float),
    # vllm#31936 log
    (
        "custom_allreduce_disabled",
        re.compile(r"Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs"),
        bool,
    ),
    ("symm_mem_unsupported", re.compile(r"SymmMemCommunicator: Device capability [\d.]+ not supported"), bool),
    (
        "env_attention_backend_deprecated",
        re.compile(r"VLLM_ATTENTION_BACKEND environment variable is deprecated"),
        bool,
    ),
    # SkyRL PR #2167: the AOT torch.compile cache was reused
    ("aot_compile_cache_hit", re.compile(r"Directly load AOT compilation from path"), bool),
    # vllm#49011 log: the FlashInfer autotune cache file, and how many configs it loaded
    ("flashinfer_autotune_cache", re.compile(r"Using FlashInfer autotune cache file:?\s*(\S+)"), str),
    ("autotuner_loaded_configs", re.compile(r"\[Autotuner\]: Loaded (\d+) configs"), int),
    ("kv_transfers", re.compile(r"KV Transfer metrics: Num successful transfers=(\d+)"), int),
)


def facts_from(lines: Iterable[str], known: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fact lines among ``lines``, added to ``known`` (what earlier lines said)."""
    found = dict(known or {})
    for line in lines:
        for name, pattern, convert in _FACTS:
            match = pattern.search(line)
            if not match:
                continue
            found[name] = True if convert is bool else convert(match.group(1))
        _note_cache(found, line)
    return found


def _note_cache(found: dict[str, Any], line: str) -> None:
    """``engine_cache``, as ``cache_proof`` reads a whole log: the first line that proves the
    compile cache was used wins; until one does, the first line that says why not."""
    if str(found.get("engine_cache", "")).startswith("cache used"):
        return
    hit = _said(_CACHE_HITS, [line])
    if hit:
        found["engine_cache"] = str(CacheProof(True, hit))
    elif "engine_cache" not in found:
        miss = _said(_CACHE_MISSES, [line])
        if miss:
            found["engine_cache"] = str(CacheProof(False, miss))


def warnings_for(facts: Mapping[str, Any], predicted_kv_tokens: int | None = None) -> list[str]:
    """What the start's facts say an operator should look at."""
    out = []
    if facts.get("fp4_marlin_fallback"):
        out.append(
            'vLLM runs FP4 through the Marlin fallback ("Your GPU does not have native support for FP4 '
            'computation"): a large slowdown'
        )
    if facts.get("env_attention_backend_deprecated"):
        out.append("VLLM_ATTENTION_BACKEND is deprecated (ignored from vLLM 0.26): declare attention_backend")
    told = kv_capacity_warning(facts.get("kv_cache_tokens"), predicted_kv_tokens)
    if told:
        out.append(told)
    return out


def kv_capacity_warning(logged: int | None, predicted: int | None) -> str | None:
    """A logged KV cache far below the checker's prediction, naming both numbers."""
    if not logged or not predicted or logged >= predicted * KV_FAR_BELOW:
        return None
    return (
        f"vLLM logged a GPU KV cache of {logged:,} tokens, far below the {predicted:,} "
        "check_serving_compat predicted from memory, weights and KV dtype: the launch does not "
        "match the plan (a stripped FP8 KV cache halves it; check gpu_memory_utilization, "
        "the KV dtype and decode_context_parallel_size)"
    )


def summary(facts: Mapping[str, Any]) -> str:
    """The facts an operator reads first, for the task's message ("" when none was logged)."""
    parts = []
    if facts.get("kv_cache_tokens"):
        parts.append(f"KV cache {facts['kv_cache_tokens']:,} tokens")
    if facts.get("attention_backend"):
        parts.append(f"attention {facts['attention_backend']}")
    if facts.get("moe_backend"):
        parts.append(f"MoE {facts['moe_backend']}")
    if facts.get("custom_allreduce_disabled"):
        parts.append("custom all-reduce off (PCIe)")
    if facts.get("aot_compile_cache_hit") or facts.get("autotuner_loaded_configs"):
        parts.append("compile/autotune cache reused")
    return f" ({', '.join(parts)})" if parts else ""


# ---- did the start use the engine cache? --------------------------------------------------

# (pattern, what it proves). A hit is any line that says a cache file was loaded; a miss
# names why. Sources: vLLM 0.32 vllm/compilation/decorators.py (the AOT lines: seen on the
# CPU build here, bench/cache_bench.py), vllm/compilation/backends.py (the graph lines),
# vllm#49011's log (FlashInfer autotune). The first hit wins over any miss: a start that
# loaded the model's AOT artifact and compiled one more range still used the cache.
_CACHE_HITS = (
    (re.compile(r"Directly load AOT compilation from path (\S+)"), "AOT compilation loaded from {0}"),
    (re.compile(r"Directly load the compiled graph\(s\) for compile range (\S+)"), "compiled graph loaded"),
    (re.compile(r"Using FlashInfer autotune cache file:?\s*(\S+)"), "FlashInfer autotune cache {0}"),
    (re.compile(r"\[Autotuner\]: Loaded (\d+) configs"), "autotuner loaded {0} configs"),
)
_CACHE_MISSES = (
    (
        re.compile(r"Compiling model again due to a load failure from (\S+), reason: (.*)"),
        "the cache at {0} failed to load: {1}",
    ),
    (re.compile(r"Detected eager backend, disabling AOT compile"), "compilation is off (eager backend)"),
    (re.compile(r"saved AOT compiled function to (\S+)"), "compiled from scratch (no cache for its key), saved {0}"),
    (re.compile(r"Compiling a graph for compile range (\S+) takes"), "compiled from scratch (graph for range {0})"),
    (re.compile(r"unable to save AOT compiled function to (\S+): (.*)"), "compiled, and the save to {0} failed: {1}"),
)
# seen on vLLM 0.32 CPU with --enforce-eager, and with VLLM_USE_AOT_COMPILE=0 (its inductor
# cache then goes to $TMPDIR/torchinductor_<user>, outside VLLM_CACHE_ROOT, and logs nothing)
NO_CACHE_LINE = "no compile-cache line in the log (eager, AOT compile off, or the log is cut before the compile)"


@dataclass(frozen=True)
class CacheProof:
    used: bool
    reason: str

    def __str__(self) -> str:
        return f"cache used: {self.reason}" if self.used else f"cache not used: {self.reason}"


def _said(table: tuple[tuple[re.Pattern[str], str], ...], lines: list[str]) -> str | None:
    for line in lines:
        for pattern, said in table:
            match = pattern.search(line)
            if match:
                return said.format(*(text.strip() for text in match.groups()))
    return None


def cache_proof(lines: Iterable[str]) -> CacheProof:
    """Whether a start's log proves its compile / autotune cache was used, and if not, why."""
    kept = list(lines)
    hit = _said(_CACHE_HITS, kept)
    if hit:
        return CacheProof(True, hit)
    return CacheProof(False, _said(_CACHE_MISSES, kept) or NO_CACHE_LINE)
