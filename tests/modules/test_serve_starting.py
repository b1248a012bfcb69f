"""What serve_vllm plans for a server recorded as "starting" (a run was interrupted while
it loaded), from what the host says about it. Real: serve_vllm's decision and wording; not
real: the host's answers, written here as ServerStatus values (the whole path, with a real
process and signals, is tests/integration/local/test_serve_interrupted.py)."""

from __future__ import annotations

from typing import Any

import pytest

from modules.serving.serve_vllm import _start_reason
from modules.serving.session import ServerStatus

SPEC = "a" * 64
LEADER = {"pid": 4242, "start_time": 1}


def status(
    state: str | None, alive: bool, health: int | None, age: float | None = 30.0, spec: str = SPEC
) -> ServerStatus:
    record: dict[str, Any] = {"pid": 4242, "spec_hash": spec, **({"state": state} if state else {})}
    return ServerStatus(
        record=record,
        leader_alive=alive,
        session=(LEADER,) if alive else (),
        health_status=health,
        health_error=None if health else "Connection refused",
        leader_age_s=age if alive else None,
    )


CASES = [
    # (what the host says, ready_timeout_s, kind planned, words in the reason)
    (
        status("starting", True, None),
        600,
        "starting",
        ["wait for vLLM pid 4242", "still starting for 30s", "570s more"],
    ),
    (status("starting", True, 200), 600, "starting", ["finish the start of vLLM pid 4242", "ready now"]),
    (status("starting", True, None, age=700), 600, "down", ["still not ready 700s after its start"]),
    (status("starting", True, None, spec="b" * 64), 600, "spec", ["pid 4242 still starting", "start was interrupted"]),
    (status("starting", False, None), 600, "down", ["pid 4242 is not running (its start was interrupted"]),
    # a server that was seen ready (or recorded by an older rigger): not answering is down
    (status("ready", True, None), 600, "down", ["running but not healthy (Connection refused)"]),
    (status(None, True, None), 600, "down", ["running but not healthy"]),
]


@pytest.mark.parametrize(("found", "timeout_s", "kind", "words"), CASES)
def test_a_server_left_starting_is_waited_for_only_while_it_may_still_load(found, timeout_s, kind, words):
    planned = _start_reason(found, SPEC, "started", timeout_s)
    assert planned is not None and planned[0] == kind, planned
    for word in words:
        assert word in planned[1], planned


def test_restarted_restarts_even_a_server_still_starting():
    assert _start_reason(status("starting", True, None), SPEC, "restarted", 600) == (
        "requested",
        "restart vLLM (state: restarted)",
    )
