"""Measure a serving endpoint: output tokens/s, time to first token, errors; fail below a floor.

Sends `requests` streamed completion requests, `concurrency` at a time, FROM the host
itself (so `127.0.0.1:PORT` works over SSH and nothing is exposed to measure it), and
reports output tokens/s (all output tokens over the wall time), time to first token
p50/p95 and errors. Fails on any error or below `min_tokens_per_s`. Changes nothing:
the result is `ok`, with the figures in the message and in `register`ed data.
Given the server's log (`log_path`, as serve_vllm registers it), failed requests are
explained: a server that crashed while being measured is reported with the fatal line
from its log (found anywhere since the start) and a hint when the cause is known.

First, in bounded time, that the server makes progress and does not only answer: vLLM's
`/health` says 200 while its EngineCore is stopped or hung (vLLM #16259). Every process of
the server (`pid`, else the process listening on `port`, and its descendants) is read from
/proc: one stopped (T) or stuck in uninterruptible sleep (D) fails the task naming it and
its state, with no request sent (it would only hang); else a 1-token completion must come
back within `wedge_timeout_s`. Only then is it measured.

Every result is stored on the controller (`rigger baselines` lists them), keyed by host,
model and `revision`, the vLLM and torch versions and the flags' hash of the `server`
serve_vllm registered (its argv, else the argv its state file records), and the GPU type;
a part that could not be read is stored as `unknown` and warned about.

Check mode skips it: the server it would measure is the one the play's earlier tasks
would have started or restarted, which check mode did not do; measuring whatever runs
now would report on the wrong server (or fail because none runs yet).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed
from modules.serving.baseline import baseline_key, record, unknown_parts
from modules.serving.bench import BenchSummary, summarize
from modules.serving.readiness import FATAL_PATTERNS, hint_for, liveness

CHECK_MODE = "measure"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["model"],
    "properties": {
        "url": {
            "type": ["string", "null"],
            "pattern": r"^https?://[^/]+/?$",
            "default": None,
            "description": "Base URL as seen from the host (http://127.0.0.1:8000); default: built from host and port.",
        },
        "host": {
            "type": "string",
            "default": "127.0.0.1",
            "description": "Address to reach the server at, from the host itself.",
        },
        "port": {
            "type": "integer",
            "minimum": 1,
            "maximum": 65535,
            "default": 8000,
            "description": "Server port.",
        },
        "model": {
            "type": "string",
            "description": "Model id to request (the served model name).",
        },
        "requests": {
            "type": "integer",
            "minimum": 1,
            "default": 8,
            "description": "Number of completion requests to send.",
        },
        "concurrency": {
            "type": "integer",
            "minimum": 1,
            "default": 4,
            "description": "Requests in flight at once.",
        },
        "max_tokens": {
            "type": "integer",
            "minimum": 1,
            "default": 64,
            "description": "Output tokens per request.",
        },
        "ignore_eos": {
            "type": "boolean",
            "default": True,
            "description": "Ask vLLM to generate exactly max_tokens (vLLM's ignore_eos); "
            "set false for servers that reject it.",
        },
        "prompt": {
            "type": "string",
            "default": "Write a short story about a GPU that could not stop computing.",
            "description": "Prompt of every request.",
        },
        "min_tokens_per_s": {
            "type": "number",
            "minimum": 0,
            "default": 0,
            "description": "Fail when output tokens/s is below this.",
        },
        "request_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 300,
            "description": "Seconds one request may take.",
        },
        "api_key_env": {
            "type": ["string", "null"],
            "default": None,
            "description": "Name of a variable in rigger's environment holding the API key "
            "(sent as a bearer token; never shown).",
        },
        "log_path": {
            "type": ["string", "null"],
            "default": None,
            "description": "The server's log on the host (serve_vllm registers it as "
            "`log_path`): when requests fail, a crash recorded there is quoted.",
        },
        "pid": {
            "type": ["integer", "null"],
            "minimum": 1,
            "default": None,
            "description": "The server's pid (serve_vllm registers it as `pid`); default: the "
            "process listening on `port`. Its processes are checked for a wedged engine.",
        },
        "wedge_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 30,
            "description": "Seconds a 1-token completion may take before a server whose /health "
            "says 200 counts as wedged (its engine alive but making no progress).",
        },
        "server": {
            "type": ["object", "null"],
            "default": None,
            "description": "What serve_vllm registered for this server (`register: vllm`, then "
            '`server: "{{ vllm }}"`): its argv (or, without one, the argv in the state file at its '
            "`state_path`) keys the stored baseline (flags' hash, vLLM and torch versions of its "
            "interpreter). Without it those parts are stored as `unknown`, with a warning.",
        },
        "revision": {
            "type": ["string", "null"],
            "default": None,
            "description": "The model's revision (a hub commit, a checkpoint tag), part of the stored baseline's key.",
        },
    },
}


def _base_url(args: Mapping[str, Any]) -> str:
    if args["url"]:
        return str(args["url"]).rstrip("/")
    host = str(args["host"])
    return f"http://{f'[{host}]' if ':' in host else host}:{args['port']}"


def _api_key(args: Mapping[str, Any]) -> str | None:
    return api_key(args["api_key_env"])


def api_key(name: str | None) -> str | None:
    """The key in rigger's environment under ``name`` (None when no name is given)."""
    if not name:
        return None
    value = os.environ.get(name)
    if not value:
        raise TaskFailed(f"check_serving: api_key_env names {name!r}, which is not set")
    return value


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change:
    return Change(
        summary=f"send {args['requests']} requests ({args['concurrency']} at a time, "
        f"{args['max_tokens']} tokens each) to {_base_url(args)}"
    )


def _message(summary: BenchSummary, url: str) -> str:
    ttft = (
        f"TTFT p50 {summary.ttft_p50_s:.3f}s p95 {summary.ttft_p95_s:.3f}s"
        if summary.ttft_p50_s is not None and summary.ttft_p95_s is not None
        else "no TTFT"
    )
    return (
        f"{summary.tokens_per_s:.1f} output tokens/s ({summary.output_tokens} tokens, "
        f"{summary.requests} requests in {summary.wall_s:.1f}s), {ttft}, "
        f"{summary.errors} errors, {url}"
    )


def _crash_line(ctx: TaskContext, args: Mapping[str, Any]) -> str | None:
    """The first fatal line of the server's log, when there is a log to read."""
    if not args["log_path"]:
        return None
    answer = ctx.conn.run_probe(
        "vllm_log_scan", {"log_path": args["log_path"], "patterns": [p.pattern for p in FATAL_PATTERNS]}
    )
    return str(answer["line"]).strip() if answer.get("line") else None


def _server_pids(ctx: TaskContext, args: Mapping[str, Any]) -> list[int]:
    if args["pid"]:
        return [int(args["pid"])]
    owners = ctx.conn.run_probe("port_owner", {"port": int(args["port"])}).get("owners") or []
    return sorted({int(owner["pid"]) for owner in owners})


def _refuse_wedged(ctx: TaskContext, args: Mapping[str, Any], url: str, key: str | None) -> None:
    answer = liveness(ctx.conn, _server_pids(ctx, args), url, str(args["model"]), key, float(args["wedge_timeout_s"]))
    if answer["wedged"]:
        raise TaskFailed(
            f"vLLM at {url} is wedged: {answer['why']}; /health answers {answer.get('health')}; "
            "serve_vllm restarts a wedged server (same spec)",
            {"url": url, "wedged": True, "stuck": answer["stuck"], "processes": answer["processes"]},
        )


def measure(ctx: TaskContext, args: Mapping[str, Any]) -> BenchSummary:
    """One load test from the host, as this module runs it, after the wedge check (the
    rollout's performance gate reuses it)."""
    url = _base_url(args)
    key = _api_key(args)
    _refuse_wedged(ctx, args, url, key)
    answer = ctx.conn.run_probe(
        "vllm_bench",
        {
            "base_url": url,
            "model": args["model"],
            "prompt": args["prompt"],
            "requests": args["requests"],
            "concurrency": args["concurrency"],
            "max_tokens": args["max_tokens"],
            "ignore_eos": args["ignore_eos"],
            "api_key": key,
            "request_timeout_s": args["request_timeout_s"],
        },
    )
    return summarize(answer["results"], float(answer["wall_s"]))


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    url = _base_url(args)
    summary = measure(ctx, args)
    key = baseline_key(ctx, str(args["model"]), args["server"], args["revision"])
    record(key, summary.as_data(), "check_serving")
    data = {**summary.as_data(), "url": url, "model": args["model"], "baseline_key": key.as_data()}
    unknown = unknown_parts(key)
    warnings = (
        (
            f"the stored measurement's {', '.join(unknown)} is unknown: pass the serve_vllm result as "
            '`server` (`register: vllm`, then `server: "{{ vllm }}"`) so `rigger baselines` compares like with like',
        )
        if unknown
        else ()
    )
    message = _message(summary, url)
    if summary.errors:
        failed = f"{message}; first errors: {'; '.join(summary.first_errors)}"
        crash = _crash_line(ctx, args)
        if crash:
            hint = hint_for([crash])
            hint_text = f"\nhint: {hint}" if hint else ""
            failed = f"vLLM at {url} died while being measured: {crash}{hint_text}\n{failed}"
        raise TaskFailed(failed, {**data, "fatal_line": crash})
    if summary.tokens_per_s < float(args["min_tokens_per_s"]):
        raise TaskFailed(f"{message}; below min_tokens_per_s {args['min_tokens_per_s']}", data)
    return Result(changed=False, msg=message, data=data, warnings=warnings)
