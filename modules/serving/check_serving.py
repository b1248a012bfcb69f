"""Measure a serving endpoint: output tokens/s, time to first token, errors; fail below a floor.

Sends `requests` streamed completion requests, `concurrency` at a time, FROM the host
itself (so `127.0.0.1:PORT` works over SSH and nothing is exposed to measure it), and
reports output tokens/s (all output tokens over the wall time), time to first token
p50/p95 and errors. Fails on any error or below `min_tokens_per_s`. Changes nothing:
the result is `ok`, with the figures in the message and in `register`ed data.

Check mode skips it: the server it would measure is the one the play's earlier tasks
would have started or restarted, which check mode did not do; measuring whatever runs
now would report on the wrong server (or fail because none runs yet).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed
from modules.serving.bench import BenchSummary, summarize

CHECK_MODE = "skip"

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
    },
}


def _base_url(args: Mapping[str, Any]) -> str:
    if args["url"]:
        return str(args["url"]).rstrip("/")
    host = str(args["host"])
    return f"http://{f'[{host}]' if ':' in host else host}:{args['port']}"


def _api_key(args: Mapping[str, Any]) -> str | None:
    name = args["api_key_env"]
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


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    url = _base_url(args)
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
            "api_key": _api_key(args),
            "request_timeout_s": args["request_timeout_s"],
        },
    )
    summary = summarize(answer["results"], float(answer["wall_s"]))
    data = {**summary.as_data(), "url": url, "model": args["model"]}
    message = _message(summary, url)
    if summary.errors:
        raise TaskFailed(f"{message}; first errors: {'; '.join(summary.first_errors)}", data)
    if summary.tokens_per_s < float(args["min_tokens_per_s"]):
        raise TaskFailed(f"{message}; below min_tokens_per_s {args['min_tokens_per_s']}", data)
    return Result(changed=False, msg=message, data=data)
