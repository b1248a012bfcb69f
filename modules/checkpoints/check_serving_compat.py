"""Preflight: will vLLM serve this model on this host's GPUs? Read-only; runs in check mode.

Reads the model directory's `config.json` (architecture, MLA = `kv_lora_rank` set in
`text_config` or at the top level, attention heads), the quantization block vLLM acts on
(config.json's `quantization_config`, else `hf_quant_config.json`) and its declared KV-cache
dtype, `total_size` from `model.safetensors.index.json`, the host's GPU facts (compute
capability, count, memory) and the vLLM installed for `vllm_python` (version, and whether
its TRITON_MLA backend accepts an FP8 KV cache - read from its source, nothing imported).

The rules live in `modules/checkpoints/compat_rules.yml`, each with its reason, fix and citation.
The declared serve spec (attention backend, KV dtype, all2all backend, TP/PP/DCP, env,
extra args) is read the way vLLM reads it; `data.attention_backend` is the MLA backend vLLM
will pick (with `data.attention_backend_why`), `data.predicted_kv_tokens` the KV capacity its
"GPU KV cache size" line should come near (an upper bound).

Measured vs recorded: every rule is tested against recorded configs, GPU readings as NVML
gives them, vLLM source snippets and log lines (tests/modules/test_compat_field_rules.py);
the facts behind the rules (which backend has kernels for which GPU, which builds carry which
PR, the rtx6kpro recipe's KV numbers) are recorded from their public sources, each named in
the rule's citation, not measured on an SM 12.x GPU by rigger.

`data.findings` lists every finding (register it and branch with `when`), each with its
severity (incompatible / warning / info), fix, citation and the vLLM versions it applies to;
`data.compatible` is false when any finding is `incompatible`, null ("cannot tell", with
`data.cannot_tell` saying why) when the host shows no GPUs or no compute capability, or the
vLLM build could not be read. `fail_on: incompatible`
(default) fails the task on such a finding, `warning` also on warnings, `never` never.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from engine.module_api import ProbeError, TaskContext, TaskFailed, Unchanged
from modules.checkpoints import compat, modelinfo, servespec
from modules.checkpoints.compat_args import SERVE_SPEC

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["model"],
    "properties": {
        "model": {"type": "string", "description": "The model directory on the host."},
        "tensor_parallel_size": {
            "type": "integer",
            "minimum": 1,
            "default": 1,
            "description": "The tensor parallel size vLLM will be started with.",
        },
        "gpu_memory_utilization": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
            "default": 0.9,
            "description": "The fraction of each GPU's memory vLLM may use (vLLM's option).",
        },
        "kv_cache_dtype": {
            "type": "string",
            "default": "auto",
            "description": "The --kv-cache-dtype vLLM will get; `auto` takes the checkpoint's.",
        },
        "fail_on": {
            "type": "string",
            "enum": ["incompatible", "warning", "never"],
            "default": "incompatible",
            "description": "Fail the task on incompatible findings, on warnings too, or never.",
        },
        "vllm_python": {
            "type": "string",
            "default": "python3",
            "description": "The host's Python interpreter that vLLM is installed for.",
        },
        "vllm_version": {
            "type": ["string", "null"],
            "default": None,
            "description": "Take this vLLM version instead of looking on the host.",
        },
        "triton_mla_fp8": {
            "type": ["boolean", "null"],
            "default": None,
            "description": "Whether vLLM's TRITON_MLA accepts an FP8 KV cache, instead of "
            "reading it from the installed vLLM's source.",
        },
        "vllm_mla_backends": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "default": None,
            "description": "The MLA backend modules of vLLM (v1/attention/backends/mla/*.py "
            "names), instead of listing the installed vLLM's.",
        },
        **SERVE_SPEC,
    },
}

# The modules that carry sparse MLA on SM 12.x (flashinfer PR #3395; vLLM's
# flashinfer_mla_sparse_sm120.py names its backend FLASHINFER_MLA_SPARSE_SM120).
SM120_SPARSE = {"flashinfer_mla_sparse_sm120", "sm12x_sparse_mla_attn", "b12x_mla_sparse"}
MODEL_FILES = ("config.json", "hf_quant_config.json", "model.safetensors.index.json")


def _read_json(ctx: TaskContext, path: str, required: bool) -> Any:
    try:
        data = ctx.conn.read_file(path)
    except OSError as exc:
        raise TaskFailed(f"cannot read {path}: {exc.strerror or exc}") from exc
    if data is None:
        if required:
            raise TaskFailed(f"{path} does not exist: is {posixpath.dirname(path)} a model?")
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFailed(f"{path} is not valid JSON: {exc}") from exc


def _vllm_probe(ctx: TaskContext, python: str) -> dict[str, Any]:
    try:
        return ctx.conn.run_probe_under(python, "model_vllm_info")
    except ProbeError as exc:
        return {"installed": False, "python": python, "error": str(exc)}


def vllm_facts(ctx: TaskContext, args: Mapping[str, Any]) -> dict[str, Any]:
    if args["vllm_version"]:
        info: dict[str, Any] = {
            "installed": True,
            "version": args["vllm_version"],
            "python": "(given)",
            "triton_mla_fp8": None,
        }
    else:
        info = _vllm_probe(ctx, args["vllm_python"])
    if args["triton_mla_fp8"] is not None:
        info["triton_mla_fp8"] = args["triton_mla_fp8"]
    if args.get("vllm_mla_backends") is not None:
        info["mla_backends"] = list(args["vllm_mla_backends"])
    facts = {
        f"vllm.{key}": info.get(key)
        for key in ("installed", "version", "distribution", "python", "triton_mla_fp8", "error")
    }
    listed = info.get("mla_backends")
    backends = set(listed) if isinstance(listed, list) else None
    facts["vllm.release"] = servespec.release(info.get("version"))
    facts["vllm.mla_backends"] = sorted(backends) if backends is not None else None
    facts["vllm.has_fa2_mla"] = None if backends is None else "flashinfer_fa2_mla" in backends
    facts["vllm.has_sm120_sparse_mla"] = None if backends is None else bool(SM120_SPARSE & backends)
    return facts


def gather_facts(ctx: TaskContext, args: Mapping[str, Any]) -> dict[str, Any]:
    config, hf_quant, index = (
        _read_json(ctx, posixpath.join(args["model"], name), name == "config.json") for name in MODEL_FILES
    )
    model = modelinfo.model_facts(config, hf_quant, index)
    model.update(modelinfo.effective_kv(model, args["kv_cache_dtype"]))
    gpu = modelinfo.gpu_facts(ctx.facts.get("gpus") or [])
    serve = modelinfo.serve_facts(
        model, gpu, args["tensor_parallel_size"], args["gpu_memory_utilization"], args["kv_cache_dtype"]
    )
    vllm = vllm_facts(ctx, args)
    facts = {**model, **gpu, **serve, **vllm, **servespec.spec_facts(args, vllm["vllm.release"])}
    backend, why = servespec.expected_backend(facts)
    facts["serve.expected_attention_backend"], facts["serve.expected_attention_why"] = backend, why
    facts["serve.predicted_kv_tokens"] = servespec.predicted_kv_tokens(facts)
    return facts


def _fails(fail_on: str, found: list[compat.Finding]) -> list[compat.Finding]:
    severities = {"incompatible": ("incompatible",), "warning": ("incompatible", "warning"), "never": ()}[fail_on]
    return [f for f in found if f.severity in severities]


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    try:
        rules = compat.load_rules()
    except (OSError, compat.RuleError) as exc:
        raise TaskFailed(f"compatibility rules unreadable: {exc}") from exc
    facts = gather_facts(ctx, args)
    found = compat.findings(rules, facts)
    unknown = compat.cannot_tell(facts)
    compatible = False if any(f.severity == "incompatible" for f in found) else (None if unknown else True)
    data = {
        "compatible": compatible,
        "cannot_tell": unknown,
        "findings": [f.as_data() for f in found],
        "attention_backend": facts["serve.expected_attention_backend"],
        "attention_backend_why": facts["serve.expected_attention_why"],
        "predicted_kv_tokens": facts["serve.predicted_kv_tokens"],
        "facts": facts,
    }
    failing = _fails(args["fail_on"], found)
    if failing:
        raise TaskFailed("; ".join(f"[{f.id}] {f.message}" for f in failing), data)
    sm = f" (SM {facts['gpu.sm']})" if facts["gpu.sm"] else ""
    summary = (
        f"{facts['model.architecture']} with TP {args['tensor_parallel_size']} on "
        f"{facts['gpu.count']} GPU(s){sm}, vLLM {facts['vllm.version'] or 'not found'}"
    )
    verdict = {True: "compatible", False: "INCOMPATIBLE", None: "cannot tell"}[compatible]
    if facts["serve.expected_attention_backend"]:
        summary += f"; attention backend {facts['serve.expected_attention_backend']}"
    if compatible is None:
        summary += " (" + "; ".join(unknown) + ")"
    return Unchanged(
        msg=f"{verdict}: {summary}; {len(found)} finding(s)",
        data=data,
        warnings=tuple(f"[{f.id}] {f.message}" for f in found if f.severity != "info"),
    )
