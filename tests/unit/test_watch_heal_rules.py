"""Which planned changes a declared heal rule lets `rigger watch` apply by itself. Real: the
policy's decision; nothing else is involved."""

from __future__ import annotations

import pytest

from engine.watch.policy import HealRule

CASES = [
    # (rule, module planned, kind planned, allowed)
    (HealRule("serve_vllm", "down"), "serve_vllm", "down", True),
    (HealRule("serve_vllm", "down"), "serve_vllm", "spec", False),
    # waiting for the server an interrupted run left loading stops and starts nothing:
    # allowed wherever restarting a dead one is, and never by another module's rule
    (HealRule("serve_vllm", "down"), "serve_vllm", "starting", True),
    (HealRule("serve_vllm", "spec"), "serve_vllm", "starting", False),
    (HealRule("write_file", "down"), "serve_vllm", "starting", False),
    (HealRule("serve_vllm"), "serve_vllm", "starting", True),
]


@pytest.mark.parametrize(("rule", "module", "kind", "allowed"), CASES)
def test_a_heal_rule_allows_its_own_kinds_and_finishing_a_start(rule, module, kind, allowed):
    assert rule.allows(module, kind) is allowed
