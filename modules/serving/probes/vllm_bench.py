"""Read-only load test of an OpenAI-compatible server, run ON the host (stdlib threads).

Args: ``base_url``, ``model``, ``prompt``, ``requests``, ``concurrency``, ``max_tokens``,
``api_key`` (bearer token; never echoed), ``request_timeout_s``. Each request is a
streamed ``/v1/completions`` call: time to first token is when the first chunk with
generated text (or a token) arrives; output tokens come from the final ``usage`` chunk
(``stream_options.include_usage``), else from the number of text chunks.
Answer: ``wall_s`` and ``results`` [{"ok", "ttft_s", "latency_s", "output_tokens",
"error"}], one per request.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any


def _request(args: dict[str, Any]) -> urllib.request.Request:
    body = {
        "model": args["model"],
        "prompt": args["prompt"],
        "max_tokens": int(args["max_tokens"]),
        "temperature": 0,
        "ignore_eos": bool(args.get("ignore_eos", True)),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if args.get("api_key"):
        headers["Authorization"] = "Bearer " + args["api_key"]
    return urllib.request.Request(
        args["base_url"] + "/v1/completions",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )


def _events(response: Any) -> Iterator[dict[str, Any]]:
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload == "[DONE]":
                return
            yield json.loads(payload)


def one_request(args: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    ttft, chunks, usage_tokens = None, 0, None
    try:
        timeout = float(args.get("request_timeout_s", 120))
        with urllib.request.urlopen(_request(args), timeout=timeout) as response:
            for event in _events(response):
                if event.get("error"):
                    raise ValueError(str(event["error"])[:300])
                if event.get("choices"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.monotonic() - started
                if event.get("usage"):
                    usage_tokens = event["usage"].get("completion_tokens")
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace") if exc.fp else ""
        return _failed(started, f"HTTP {exc.code}: {detail}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return _failed(started, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")
    tokens = usage_tokens if usage_tokens is not None else chunks
    return {
        "ok": True,
        "ttft_s": ttft,
        "latency_s": time.monotonic() - started,
        "output_tokens": tokens,
        "error": None,
    }


def _failed(started: float, error: str) -> dict[str, Any]:
    return {
        "ok": False,
        "ttft_s": None,
        "latency_s": time.monotonic() - started,
        "output_tokens": 0,
        "error": error,
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    total = int(args["requests"])
    results: list[dict[str, Any] | None] = [None] * total
    next_index = [0]
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                index = next_index[0]
                next_index[0] += 1
            if index >= total:
                return
            results[index] = one_request(args)

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(min(int(args["concurrency"]), total))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"wall_s": time.monotonic() - started, "results": results}
