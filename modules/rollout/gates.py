"""The gates a host passes after its change, each a result with its evidence.

- readiness: serve_vllm's staged start (/health, /v1/models, a completion) succeeded;
- golden: prompts answered at temperature 0 the same as the previous server answered them
  on this host, asked just before the change;
- structured: where the playbook declares tools or a JSON schema, the server's answers
  constrained to them (vLLM's structured outputs: `response_format` on /v1/completions, a
  named `tool_choice` on /v1/chat/completions) must parse as JSON and validate against the
  schema; a tool call must name a declared tool and its arguments validate against that
  tool's `parameters`;
- performance: tokens/s and TTFT p50/p95, measured as check_serving measures them, against
  the same host's figures just before the change, judged by the noise rule (relative
  threshold and the spread of the repeated measurements: engine/baselines/noise.py).
A gate is a function of evidence: a new one (the health verdict) is one more entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from engine.module_api import TaskContext, TaskFailed, judge
from modules.serving import check_serving
from modules.serving.bench import BenchSummary


@dataclass(frozen=True)
class GateResult:
    gate: str
    passed: bool
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def as_data(self) -> dict[str, Any]:
        return {"gate": self.gate, "passed": self.passed, "summary": self.summary, "evidence": dict(self.evidence)}


@dataclass(frozen=True)
class Endpoint:
    """The server on one host, as the gates reach it: from that host, never through the LB."""

    port: int
    served_name: str
    api_key_env: str | None
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def readiness(started: Mapping[str, Any] | None, failure: TaskFailed | None) -> GateResult:
    if failure is not None:
        data = dict(failure.data) if isinstance(getattr(failure, "data", None), Mapping) else {}
        evidence: dict[str, Any] = {
            k: data.get(k) for k in ("fatal_line", "phase", "healthy_at_s", "log_tail") if k in data
        }
        return GateResult("readiness", False, str(failure).splitlines()[0], evidence)
    data = dict(started or {})
    phases = data.get("phases") or []
    summary = f"ready in {data.get('ready_s')}s" if data.get("ready_s") is not None else "already running this spec"
    return GateResult("readiness", True, summary, {"ready_s": data.get("ready_s"), "phases": phases})


def ask_golden(ctx: TaskContext, endpoint: Endpoint, prompts: Sequence[str], max_tokens: int) -> list[str]:
    """Each prompt's completion at temperature 0 (vLLM's greedy decoding)."""
    answers = []
    for prompt in prompts:
        body = {"model": endpoint.served_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        answer = ctx.conn.run_probe(
            "vllm_http",
            {
                "url": endpoint.url + "/v1/completions",
                "method": "POST",
                "json": body,
                "api_key": check_serving.api_key(endpoint.api_key_env),
                "timeout_s": 120,
            },
        )
        if answer.get("error") or answer.get("status") != 200:
            raise TaskFailed(f"golden prompt {prompt!r}: {answer.get('error') or 'HTTP ' + str(answer.get('status'))}")
        answers.append(str(json.loads(answer["body"])["choices"][0]["text"]))
    return answers


def golden(prompts: Sequence[str], before: Sequence[str], after: Sequence[str]) -> GateResult:
    differing = [
        {"prompt": p, "before": b, "after": a} for p, b, a in zip(prompts, before, after, strict=True) if b != a
    ]
    if differing:
        return GateResult(
            "golden",
            False,
            f"{len(differing)} of {len(prompts)} golden prompts answered differently at temperature 0",
            {"differing": differing, "prompts": len(prompts)},
        )
    return GateResult("golden", True, f"{len(prompts)} golden prompts answered as before", {"prompts": len(prompts)})


TEXT_LIMIT = 300  # characters of an answer kept as evidence


@dataclass(frozen=True)
class StructuredAsk:
    """One constrained request: a prompt and what it is forced into, the JSON schema (on
    /v1/completions) or one declared tool (on /v1/chat/completions)."""

    prompt: str
    tool: str | None = None

    @property
    def label(self) -> str:
        return f"tool {self.tool}" if self.tool else "JSON schema"


@dataclass(frozen=True)
class StructuredAnswer:
    """What the server answered to one ask, as the vllm_http probe brought it back."""

    ask: StructuredAsk
    status: int | None
    body: str
    error: str | None = None


def structured_problems(config: Mapping[str, Any]) -> list[str]:
    """What is wrong with the declared schemas themselves, found before anything changes."""
    problems = []
    schemas = [("json_schema", config["json_schema"])] if config.get("json_schema") is not None else []
    schemas += [(f"tool {t['name']}'s parameters", t["parameters"]) for t in config.get("tools") or []]
    for where, schema in schemas:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            problems.append(f"{where} is not a JSON schema: {exc.message}")
    names = [t["name"] for t in config.get("tools") or []]
    problems += [f"tool {n} is declared {names.count(n)} times" for n in sorted(set(names)) if names.count(n) > 1]
    return problems


def structured_asks(config: Mapping[str, Any]) -> list[StructuredAsk]:
    asks = []
    for prompt in config["prompts"]:
        if config.get("json_schema") is not None:
            asks.append(StructuredAsk(prompt))
        asks += [StructuredAsk(prompt, t["name"]) for t in config.get("tools") or []]
    return asks


def openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters") if k in tool}}


def structured_request(config: Mapping[str, Any], ask: StructuredAsk, served_name: str) -> tuple[str, dict[str, Any]]:
    """The path and body of one ask, constrained the way vLLM takes it. `response_format`
    (OpenAI's field, which vLLM 0.32 turns into its structured outputs) rather than vLLM's
    own `structured_outputs`, a name vLLM has changed before (0.32 ignores the older
    `guided_json` and answers unconstrained): a rollout gates whatever build it installs,
    and a build that ignores the field answers unconstrained, which the judge fails. A
    named `tool_choice` makes vLLM force the arguments into the tool's parameters (it needs
    `--enable-auto-tool-choice --tool-call-parser` on the server, else it answers 400: the
    gate fails with that answer)."""
    common = {"model": served_name, "max_tokens": config["max_tokens"], "temperature": 0}
    if ask.tool is None:
        schema = {"name": "rigger_gate", "schema": config["json_schema"]}
        response_format = {"type": "json_schema", "json_schema": schema}
        return "/v1/completions", {**common, "prompt": ask.prompt, "response_format": response_format}
    return "/v1/chat/completions", {
        **common,
        "messages": [{"role": "user", "content": ask.prompt}],
        "tools": [openai_tool(t) for t in config["tools"]],
        "tool_choice": {"type": "function", "function": {"name": ask.tool}},
    }


def ask_structured(ctx: TaskContext, endpoint: Endpoint, config: Mapping[str, Any]) -> list[StructuredAnswer]:
    """Every ask's answer, as it came (an HTTP error or no answer is the judge's evidence)."""
    answers = []
    for ask in structured_asks(config):
        path, body = structured_request(config, ask, endpoint.served_name)
        answer = ctx.conn.run_probe(
            "vllm_http",
            {
                "url": endpoint.url + path,
                "method": "POST",
                "json": body,
                "api_key": check_serving.api_key(endpoint.api_key_env),
                "timeout_s": 120,
            },
        )
        answers.append(StructuredAnswer(ask, answer.get("status"), str(answer.get("body") or ""), answer.get("error")))
    return answers


def structured(config: Mapping[str, Any], answers: Sequence[StructuredAnswer]) -> GateResult:
    """Each answer parses as JSON and validates against its schema; a tool call names a
    declared tool (the one asked for) and its arguments validate against its parameters."""
    checked = [_checked(config, a) for a in answers]
    failed = [c for c in checked if c["error"]]
    asked = ", ".join(dict.fromkeys(a.ask.label for a in answers))
    evidence = {"answers": checked, "failed": len(failed)}
    if failed:
        first = failed[0]
        return GateResult(
            "structured",
            False,
            f"{len(failed)} of {len(checked)} structured answers failed; {first['asked']} on "
            f"{first['prompt']!r}: {first['error']}",
            evidence,
        )
    return GateResult("structured", True, f"{len(checked)} structured answers valid ({asked})", evidence)


@dataclass(frozen=True)
class _Reply:
    """One answer read: the text to judge (a completion's text, the tool call's arguments;
    else what came back), its finish_reason, the tool calls, or why there is nothing to judge."""

    text: str
    finish: str | None = None
    calls: tuple[Mapping[str, Any], ...] = ()
    error: str | None = None


def _checked(config: Mapping[str, Any], answer: StructuredAnswer) -> dict[str, Any]:
    reply = _reply(answer)
    error = reply.error or _verdict(config, answer.ask, reply)
    return {"prompt": answer.ask.prompt, "asked": answer.ask.label, "error": error, "finish_reason": reply.finish,
            "text": _truncated(reply.text)}  # fmt: skip


def _reply(answer: StructuredAnswer) -> _Reply:
    if answer.status is None:
        return _Reply("", error=f"no answer: {answer.error}")
    try:
        body = json.loads(answer.body)
        choice = body["choices"][0] if answer.status == 200 else None
    except (ValueError, KeyError, IndexError, TypeError):
        return _Reply(answer.body, error=f"HTTP {answer.status}: not an OpenAI answer")
    if not isinstance(choice, Mapping):
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        return _Reply(answer.body, error=f"HTTP {answer.status}: {message or 'no choice'}")
    finish = choice.get("finish_reason")
    if answer.ask.tool is None:
        return _Reply(str(choice.get("text") or ""), finish)
    message = choice.get("message") or {}
    calls = tuple(c.get("function") or {} for c in message.get("tool_calls") or [])
    if not calls:
        return _Reply(str(message.get("content") or ""), finish, error="no tool call in the answer")
    arguments = calls[0].get("arguments")
    return _Reply(arguments if isinstance(arguments, str) else json.dumps(arguments), finish, calls)


def _verdict(config: Mapping[str, Any], ask: StructuredAsk, reply: _Reply) -> str | None:
    if ask.tool is None:
        return _json_error(reply.text, config["json_schema"], reply.finish, config["max_tokens"])
    declared = {t["name"]: t for t in config.get("tools") or []}
    names = [str(c.get("name")) for c in reply.calls]
    undeclared = [n for n in names if n not in declared]
    if undeclared:
        return f"calls {undeclared[0]!r}, a tool the playbook does not declare (it declares {', '.join(declared)})"
    if names != [ask.tool]:
        return f"calls {', '.join(names)}; asked for {ask.tool} alone"
    return _json_error(reply.text, declared[ask.tool]["parameters"], reply.finish, config["max_tokens"])


def _json_error(text: str, schema: Mapping[str, Any], finish: str | None, max_tokens: int) -> str | None:
    try:
        value = json.loads(text)
    except ValueError as exc:
        cut = f"cut off at max_tokens ({max_tokens}) and " if finish == "length" else ""
        return f"{cut}not JSON: {exc}"
    error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
    return f"fails the schema at {error.json_path}: {error.message}" if error is not None else None


def _truncated(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + f"... ({len(text) - TEXT_LIMIT} more characters)"


def _load_test_args(endpoint: Endpoint, config: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **{k: v["default"] for k, v in check_serving.SCHEMA["properties"].items() if "default" in v},
        "port": endpoint.port,
        "model": endpoint.served_name,
        "api_key_env": endpoint.api_key_env,
        "requests": config["requests"],
        "concurrency": config["concurrency"],
        "max_tokens": config["max_tokens"],
    }


def _load_tests(ctx: TaskContext, endpoint: Endpoint, config: Mapping[str, Any], count: int) -> list[BenchSummary]:
    """``count`` load tests of the host's server, the way check_serving runs one; a failed
    request fails them all (a server that errors is not measured)."""
    args = _load_test_args(endpoint, config)
    samples = []
    for _ in range(count):
        summary = check_serving.measure(ctx, args)
        if summary.errors:
            raise TaskFailed(
                f"{summary.errors} of {summary.requests} requests failed: {'; '.join(summary.first_errors)}"
            )
        samples.append(summary)
    return samples


def measure(ctx: TaskContext, endpoint: Endpoint, config: Mapping[str, Any]) -> list[BenchSummary]:
    """``repeats`` load tests: the samples a verdict is made of."""
    return _load_tests(ctx, endpoint, config, int(config["repeats"]))


def warm_up(ctx: TaskContext, endpoint: Endpoint, config: Mapping[str, Any]) -> list[BenchSummary]:
    """``warmup`` load tests whose figures are not judged. A server that was just started (by
    this rollout, by the rollback of an earlier one, by a restart) answers its first requests
    slower; measured cold, its baseline is both slow and wide, and a wide band lets a slower
    release through. In CI a tiny vLLM CPU canary relaunched by the previous rollout's
    rollback measured a TTFT p50 median of 0.26 s and a spread of 0.27 s where its warm
    neighbour measured 0.064 s and 0.025 s; here, its first load test 0.37 s, the next three
    0.04-0.07 s."""
    return _load_tests(ctx, endpoint, config, int(config["warmup"]))


FIGURES = (
    ("tokens_per_s", True, "relative"),
    ("ttft_p50_s", False, "ttft_relative"),
    ("ttft_p95_s", False, "ttft_relative"),
)


def performance(before: Sequence[BenchSummary], after: Sequence[BenchSummary], config: Mapping[str, Any]) -> GateResult:
    verdicts = []
    for figure, higher_is_better, threshold in FIGURES:
        base = [float(v) for v in (getattr(s, figure) for s in before) if v is not None]
        now = sorted(float(v) for v in (getattr(s, figure) for s in after) if v is not None)
        if not base or not now:
            continue
        value = now[len(now) // 2]
        verdicts.append(
            judge(
                figure,
                base,
                value,
                higher_is_better=higher_is_better,
                relative=float(config[threshold]),
                noise_k=float(config["noise_k"]),
            )
        )
    worse = [v for v in verdicts if v.worse]
    evidence = {
        "verdicts": [v.as_data() for v in verdicts],
        "before": [s.as_data() for s in before],
        "after": [s.as_data() for s in after],
    }
    if worse:
        return GateResult("performance", False, "; ".join(v.describe() for v in worse), evidence)
    return GateResult("performance", True, "; ".join(v.describe() for v in verdicts), evidence)
