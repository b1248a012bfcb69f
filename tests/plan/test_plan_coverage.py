"""Every task module has plan() cases, at least three each."""

from __future__ import annotations

from plan_cases import FIXTURES

from engine import registry


def test_every_module_has_at_least_three_plan_cases() -> None:
    counts = {name: len(list((FIXTURES / name).glob("*.json"))) for name in registry.module_names()}
    assert all(count >= 3 for count in counts.values()), counts
