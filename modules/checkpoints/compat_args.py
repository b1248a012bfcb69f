"""The serve-spec arguments of check_serving_compat: what vLLM will be started with.

The same words serve_vllm uses (modules/serving/spec.py), so a playbook can hand the check
the spec it is about to serve.
"""

from __future__ import annotations

from typing import Any

SERVE_SPEC: dict[str, Any] = {
    "pipeline_parallel_size": {
        "type": "integer",
        "minimum": 1,
        "default": 1,
        "description": "The pipeline parallel size (--pipeline-parallel-size).",
    },
    "decode_context_parallel_size": {
        "type": "integer",
        "minimum": 1,
        "default": 1,
        "description": "The decode context parallel size (--decode-context-parallel-size): "
        "MLA's KV cache is split over this many ranks, multiplying its capacity.",
    },
    "attention_backend": {
        "type": ["string", "null"],
        "default": None,
        "description": "The --attention-backend vLLM will get (null: vLLM picks).",
    },
    "all2all_backend": {
        "type": ["string", "null"],
        "default": None,
        "description": "The --all2all-backend for expert parallel MoE (null: vLLM's default).",
    },
    "enable_expert_parallel": {
        "type": "boolean",
        "default": False,
        "description": "Whether vLLM gets --enable-expert-parallel.",
    },
    "block_size": {
        "type": ["integer", "null"],
        "minimum": 1,
        "default": None,
        "description": "The --block-size vLLM will get (null: vLLM's default).",
    },
    "kv_offloading_backend": {
        "type": ["string", "null"],
        "default": None,
        "description": "The --kv-offloading-backend (native, lmcache), if KV is offloaded.",
    },
    "env": {
        "type": "object",
        "additionalProperties": {"type": ["string", "number", "boolean"]},
        "default": {},
        "description": "The environment vLLM will be started with (names and values).",
    },
    "extra_args": {
        "type": "array",
        "items": {"type": "string"},
        "default": [],
        "description": "Further vLLM arguments, as serve_vllm's extra_args.",
    },
}
