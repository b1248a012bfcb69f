"""Serving-compatibility rules: named facts in, findings out.

The rules live in ``modules/checkpoints/compat_rules.yml``. A condition is data, never code:
``{fact: NAME, OP: VALUE}`` (OP in eq ne lt le gt ge in not_in; VALUE a literal or
``{fact: OTHER}``), combined with ``all`` / ``any`` / ``not``. A comparison with an
unknown (null) fact is false, except ``eq: null``. Facts are flat dotted names:

- ``model.*``: architecture, model_type, is_mla, is_sparse_mla, is_moe, is_nvfp4,
  kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, num_layers, kv_heads, head_dim,
  attention_heads, quant_method, quant_algo, kv_cache_dtype, kv_cache_fp8 (what vLLM will
  use), checkpoint_kv_cache_fp8 (what the checkpoint declares), kv_cache_source,
  weights_bytes, weights_gib
- ``gpu.*``: count, sm, sm_major, capability ([major, minor]), min_memory_mib,
  min_memory_gib, names, nvlink_links_min, pcie_only (null: NVLink state not read)
- ``serve.*``: tensor_parallel_size, pipeline_parallel_size, decode_context_parallel_size,
  world_size, dcp_remainder, gpu_memory_utilization, usable_bytes, usable_gib,
  weights_fraction, weights_percent, heads_remainder, kv_cache_dtype, attention_backend,
  attention_backend_spellings, attention_backend_flags, env_attention_backend,
  forced_attention_backend, expected_attention_backend, expected_attention_why,
  all2all_backend, all2all_needs_nvlink, enable_expert_parallel, block_size,
  nccl_p2p_disabled, kv_offloading, predicted_kv_tokens
- ``vllm.*``: installed, version, release ([0, 32, 0]), distribution, python,
  triton_mla_fp8, mla_backends, has_fa2_mla, has_sm120_sparse_mla

Severities: incompatible (vLLM will refuse or fail), warning (it may start but go wrong),
info (what vLLM will do, and advice). ``versions`` says which vLLM builds a rule is about.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

RULES_FILE = Path(__file__).resolve().parent / "compat_rules.yml"
SEVERITIES = ("incompatible", "warning", "info")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "in": lambda left, right: left in right,
    "not_in": lambda left, right: left not in right,
}
_PLACEHOLDER = re.compile(r"\{([a-z_]+(?:\.[a-z_]+)*)\}")
GIB = 2**30


class RuleError(ValueError):
    """The rules file is malformed."""


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    when: Mapping[str, Any]
    reason: str
    fix: str
    citation: str
    detail: str = ""
    versions: str = ""


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str
    message: str
    reason: str
    fix: str
    detail: str
    citation: str
    versions: str = ""

    def as_data(self) -> dict[str, str]:
        return {
            "versions": self.versions,
            "id": self.id,
            "severity": self.severity,
            "message": self.message,
            "reason": self.reason,
            "fix": self.fix,
            "detail": self.detail,
            "citation": self.citation,
        }


def _check_condition(cond: Any, rule_id: str) -> None:
    if not isinstance(cond, dict) or not cond:
        raise RuleError(f"rule {rule_id}: a condition must be a mapping")
    if "all" in cond or "any" in cond:
        parts = cond.get("all", cond.get("any"))
        if len(cond) != 1 or not isinstance(parts, list):
            raise RuleError(f"rule {rule_id}: all/any take a list and nothing else")
        for part in parts:
            _check_condition(part, rule_id)
        return
    if "not" in cond:
        _check_condition(cond["not"], rule_id)
        return
    ops = [key for key in cond if key != "fact"]
    if "fact" not in cond or len(ops) != 1 or ops[0] not in _OPS:
        raise RuleError(f"rule {rule_id}: expected {{fact: NAME, OP: VALUE}}, got {cond}")


def parse_rules(document: Any) -> tuple[Rule, ...]:
    if not isinstance(document, dict) or not isinstance(document.get("rules"), list):
        raise RuleError("the rules file needs a top-level 'rules' list")
    rules: list[Rule] = []
    for raw in document["rules"]:
        try:
            rule = Rule(**raw)
        except TypeError as exc:
            raise RuleError(f"rule {raw.get('id', '?')}: {exc}") from exc
        if rule.severity not in SEVERITIES:
            raise RuleError(f"rule {rule.id}: severity must be one of {SEVERITIES}")
        _check_condition(rule.when, rule.id)
        rules.append(rule)
    ids = [rule.id for rule in rules]
    if len(set(ids)) != len(ids):
        raise RuleError("rule ids must be unique")
    return tuple(rules)


@cache
def load_rules(path: Path = RULES_FILE) -> tuple[Rule, ...]:
    return parse_rules(yaml.safe_load(path.read_text(encoding="utf-8")))


def _operand(value: Any, facts: Mapping[str, Any]) -> Any:
    if isinstance(value, dict) and set(value) == {"fact"}:
        return facts.get(value["fact"])
    return value


def evaluate(cond: Mapping[str, Any], facts: Mapping[str, Any]) -> bool:
    if "all" in cond:
        return all(evaluate(part, facts) for part in cond["all"])
    if "any" in cond:
        return any(evaluate(part, facts) for part in cond["any"])
    if "not" in cond:
        return not evaluate(cond["not"], facts)
    (op,) = (key for key in cond if key != "fact")
    left = facts.get(cond["fact"])
    right = _operand(cond[op], facts)
    if left is None or right is None:
        return op == "eq" and left is None and right is None
    try:
        return bool(_OPS[op](left, right))
    except TypeError:
        return False


def render(template: str, facts: Mapping[str, Any]) -> str:
    def value(match: re.Match[str]) -> str:
        found = facts.get(match.group(1))
        return "unknown" if found is None else str(found)

    return " ".join(_PLACEHOLDER.sub(value, template).split())


def findings(rules: tuple[Rule, ...], facts: Mapping[str, Any]) -> list[Finding]:
    found = []
    for rule in rules:
        if not evaluate(rule.when, facts):
            continue
        reason, fix = render(rule.reason, facts), render(rule.fix, facts)
        found.append(
            Finding(
                id=rule.id,
                severity=rule.severity,
                message=f"{reason}; {fix}",
                reason=reason,
                fix=fix,
                detail=render(rule.detail, facts),
                citation=render(rule.citation, {}),
                versions=rule.versions,
            )
        )
    return found


def cannot_tell(facts: Mapping[str, Any]) -> list[str]:
    """Why no verdict can be given from these facts (empty: one can). Without GPUs, or
    without their compute capability, the memory and attention-backend rules never ran:
    "compatible" would be a guess."""
    if not facts.get("gpu.count"):
        return ["no GPUs readable on this host (GPU facts: NVML or nvidia-smi must work there)"]
    if facts.get("gpu.sm") is None:
        return [f"the compute capability of the {facts['gpu.count']} GPU(s) is unknown"]
    if not facts.get("vllm.version"):
        why = facts.get("vllm.error") or f"no vLLM distribution found for {facts.get('vllm.python')}"
        return [f"the vLLM build could not be read ({why}): give vllm_python or vllm_version"]
    return _build_unknowns(facts)


def _build_unknowns(facts: Mapping[str, Any]) -> list[str]:
    """What the verdict hangs on that the build did not say (its version alone does not)."""
    sm12_mla = facts.get("gpu.sm_major") == 12 and facts.get("model.is_mla")
    unknown = []
    if sm12_mla and facts.get("model.kv_cache_fp8") and facts.get("vllm.triton_mla_fp8") is None:
        unknown.append("whether this vLLM's TRITON_MLA takes an FP8 KV cache (its triton_mla.py was not read)")
    if sm12_mla and facts.get("model.is_sparse_mla") and facts.get("vllm.has_sm120_sparse_mla") is None:
        unknown.append("whether this vLLM has the SM 12.x sparse MLA backend (its MLA modules were not read)")
    return unknown
