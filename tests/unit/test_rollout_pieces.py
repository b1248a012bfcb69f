"""The rollout's pure parts: the schedule (canary, then Ansible's serial, counts and
percentages), the golden and performance gates' verdicts on measured figures, the failure
budget counted across batches, and `rigger show` of a rollout record (the real CLI, in the
test process). The figures are written by hand in the shape check_serving measures them;
the slow test (tests/integration/vllm/test_rollout.py) runs all of it against real vLLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modules.rollout import gates, rollout
from modules.rollout.fleet import schedule
from modules.rollout.hoststep import HostTurn
from modules.rollout.journal import Journal
from modules.serving.bench import BenchSummary

PERF = rollout.PERFORMANCE_DEFAULTS


def bench(tokens_per_s: float, ttft: float = 0.1) -> BenchSummary:
    return BenchSummary(8, 0, 256, 256 / tokens_per_s, tokens_per_s, ttft, ttft * 1.5, 1.0, ())


@pytest.mark.parametrize(
    ("canary", "serial", "expected"),
    [
        (1, [1], [["a"], ["b"], ["c"], ["d"]]),
        (1, [2], [["a"], ["b", "c"], ["d"]]),
        ("25%", ["50%"], [["a"], ["b", "c"], ["d"]]),
        (2, [1, "100%"], [["a", "b"], ["c"], ["d"]]),
    ],
)
def test_the_canary_goes_first_then_ansible_serial(canary: Any, serial: list[Any], expected: list[list[str]]) -> None:
    assert schedule(["a", "b", "c", "d"], canary, serial) == expected


def test_golden_compares_each_answer_with_the_previous_servers() -> None:
    same = gates.golden(["p1", "p2"], ["x", "y"], ["x", "y"])
    assert same.passed
    changed = gates.golden(["p1", "p2"], ["x", "y"], ["x", "z"])
    assert not changed.passed
    assert changed.evidence["differing"] == [{"prompt": "p2", "before": "y", "after": "z"}]


def test_performance_passes_an_unchanged_server_and_fails_a_halved_one() -> None:
    before = [bench(100), bench(95), bench(104)]
    assert gates.performance(before, [bench(97), bench(101), bench(92)], PERF).passed
    halved = gates.performance(before, [bench(50), bench(49), bench(52)], PERF)
    assert not halved.passed and "tokens_per_s" in halved.summary
    slow_start = gates.performance(before, [bench(100, ttft=0.5)] * 3, PERF)
    assert not slow_start.passed and "ttft_p50_s" in slow_start.summary


def test_the_canary_always_stops_later_failures_count_against_the_budget() -> None:
    run = Journal.start([["a"], ["b"], ["c"], ["d"]], ["readiness"], max_fail=30)
    run.add(HostTurn("a", run.rollout_id, outcome="rolled back"))
    assert "canary failed: a (rolled back)" in str(run.stop_reason(0))
    later = Journal.start([["a"], ["b"], ["c"], ["d"]], ["readiness"], max_fail=30)
    later.add(HostTurn("a", later.rollout_id, outcome="upgraded"))
    later.add(HostTurn("b", later.rollout_id, outcome="rolled back"))
    assert later.stop_reason(1) is None  # 1 of 4 = 25% <= 30%
    later.add(HostTurn("c", later.rollout_id, outcome="rolled back"))
    assert "2 of 4 hosts failed (50% > max_fail_percentage 30%)" in str(later.stop_reason(2))


def test_rigger_show_renders_a_rollout_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rigger) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RIGGER_STATE_DIR", str(tmp_path))
    run = Journal.start([["a"], ["b"]], ["readiness", "golden (1 prompts)"], max_fail=0)
    turn = HostTurn("a", run.rollout_id, outcome="rolled back")
    turn.gates = [gates.readiness({"ready_s": 31.0}, None).as_data(), gates.golden(["p"], ["x"], ["z"]).as_data()]
    turn.rolled_back = {"pid": 42, "spec_hash": "ab" * 32, "ready_s": 30.5, "checks": []}
    run.add(turn)
    run.finish("stopped", run.stop_reason(0))
    record = run.saved()
    assert json.loads(Path(record["record_file"]).read_text())["id"] == run.rollout_id
    shown = rigger("show", record["record_file"])
    assert shown.rc == 0, shown.stderr
    expected = ("stopped: the canary failed", "batch 1 (canary): a", "gate golden: FAILED",
                "prompt 'p': before 'x', after 'z'", "rolled back to spec abababababab", "not started: b")  # fmt: skip
    for line in expected:
        assert line in shown.stdout, shown.stdout
