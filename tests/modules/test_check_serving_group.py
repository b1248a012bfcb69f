"""check_serving_group's check (its apply): every rank's processes, then a completion.

Real: the module, the scoped connection, the probe parser. Not real: the two nodes, which
are RecordedHosts replaying the plan fixtures' recordings (tests/plan_fixtures/
serve_vllm_group: a healthy group, and one whose node1 worker is gone while the head's
/health still answers 200).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from recorded_host import RecordedHost

import modules.serving.check_serving_group as check_serving_group
from engine import registry
from engine.connection.base import ScopedConnection
from engine.module_api import Change, TaskContext, TaskFailed

FIXTURES = Path(__file__).resolve().parents[1] / "plan_fixtures" / "serve_vllm_group"


def run_check(case_name: str) -> tuple[Any, dict[str, RecordedHost]]:
    case = json.loads((FIXTURES / f"{case_name}.json").read_text())
    hosts = {"node0": RecordedHost(**case["host"]), "node1": RecordedHost(host_name="node1", **case["peers"]["node1"])}
    spec = registry.get("check_serving_group")
    args = spec.with_defaults(spec.coerced({k: v for k, v in case["args"].items() if k != "state"}))
    ctx = TaskContext("node0", ScopedConnection(hosts["node0"]), {}, case["vars"], connect=hosts.__getitem__)
    return check_serving_group.apply(ctx, args, Change("check")), hosts


def completions_sent(host: RecordedHost) -> list[dict[str, Any]]:
    return [a for name, a in host.probe_args if name == "vllm_http" and a["url"].endswith("/v1/completions")]


def test_a_dead_worker_rank_fails_the_check_though_the_head_is_healthy() -> None:
    with pytest.raises(TaskFailed) as failed:
        run_check("dead_worker_on_node1_restarts_the_whole_group")
    assert "rank 1 on node1: pid 7200 is alive but only 0 of 1 vLLM worker processes are" in failed.value.msg
    assert failed.value.data["down"] and failed.value.data["completion"] == "no completion tried"


def test_every_rank_alive_and_a_completion_passes() -> None:
    result, hosts = run_check("every_rank_alive_same_spec_is_unchanged")
    assert not result.changed and "2 rank(s) alive (2 worker processes) on 2 nodes" in result.msg
    sent = completions_sent(hosts["node0"])
    assert len(sent) == 1 and sent[0]["json"]["model"] == "tiny" and sent[0]["method"] == "POST"
    assert completions_sent(hosts["node1"]) == []


def test_a_stopped_worker_rank_is_wedged_and_no_completion_is_tried() -> None:
    case = json.loads((FIXTURES / "every_rank_alive_same_spec_is_unchanged.json").read_text())
    stuck = {"pid": 7201, "name": "VLLM::Worker_TP0", "state": "T", "why": "stopped (SIGSTOP)"}
    case["peers"]["node1"]["probes"]["vllm_liveness"] = {
        "processes": [stuck], "stuck": [stuck], "wedged": True,
        "why": "VLLM::Worker_TP0 (pid 7201) is stopped (SIGSTOP) (state T)",
    }  # fmt: skip
    hosts = {"node0": RecordedHost(**case["host"]), "node1": RecordedHost(host_name="node1", **case["peers"]["node1"])}
    spec = registry.get("check_serving_group")
    args = spec.with_defaults(spec.coerced({k: v for k, v in case["args"].items() if k != "state"}))
    ctx = TaskContext("node0", ScopedConnection(hosts["node0"]), {}, case["vars"], connect=hosts.__getitem__)
    with pytest.raises(TaskFailed) as failed:
        check_serving_group.apply(ctx, args, Change("check"))
    assert "node1: wedged: VLLM::Worker_TP0 (pid 7201) is stopped (SIGSTOP) (state T)" in failed.value.msg
    assert completions_sent(hosts["node0"]) == []
    sent = [a for name, a in hosts["node1"].probe_args if name == "vllm_liveness"]
    assert sent and sent[0]["processes_only"] is True
