"""Read-only, one readiness step of a starting vLLM server, asked ON the host.

Args: ``pid``, ``start_time`` (the recorded leader), ``log_path``, ``offset`` (bytes of the
log already read), ``base_url`` (http://127.0.0.1:PORT), ``served_name``, ``api_key``
(bearer token for /v1; never echoed), ``stage`` (the last stage passed: none, health,
models), ``request_timeout_s``.

Answer: ``alive``, ``log_text`` (new log text since ``offset``, at most 256 KiB: the end
of it when more arrived), ``offset``, ``stage`` (the last stage passed now: none, health,
models, completion), ``detail`` (what the last check answered).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("procs", "vllm_http")

import json
import os

MAX_CHUNK = 262144
STAGES = ("none", "health", "models", "completion")


def read_log(path: str, offset: int) -> tuple[str, int]:
    try:
        size = os.path.getsize(path)
    except OSError:
        return "", offset
    if size < offset:  # rotated or truncated: start again
        offset = 0
    start = max(offset, size - MAX_CHUNK)
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(size - start)
    return data.decode("utf-8", "replace"), start + len(data)


def alive(pid: int, start_time: int | None) -> bool:
    found = call("procs", {"pids": [int(pid)]})["processes"]
    if not found or found[0]["state"] in ("Z", "X"):
        return False
    return bool(found[0]["start_time"] == start_time)


def _get(args: dict[str, Any], path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    request = {"url": args["base_url"] + path, "timeout_s": args.get("request_timeout_s", 5)}
    if body is not None:
        request.update({"method": "POST", "json": body})
    if args.get("api_key") and path.startswith("/v1"):
        request["api_key"] = args["api_key"]
    answer: dict[str, Any] = call("vllm_http", request)
    return answer


def _models_list(body: str) -> list[Any]:
    try:
        return [entry.get("id") for entry in json.loads(body).get("data", [])]
    except (ValueError, AttributeError):
        return []


def _answered(path: str, answer: dict[str, Any]) -> str:
    return f"{path} answered {answer['status']}: {answer['body'][:300]}"


def check_health(args: dict[str, Any]) -> tuple[bool, str]:
    answer = _get(args, "/health")
    return answer["status"] == 200, answer["error"] or f"/health answered {answer['status']}"


def check_models(args: dict[str, Any]) -> tuple[bool, str]:
    answer = _get(args, "/v1/models")
    ids = _models_list(answer["body"]) if answer["status"] == 200 else []
    if args["served_name"] in ids:
        return True, "/v1/models lists " + args["served_name"]
    if answer["status"] != 200:
        return False, answer["error"] or _answered("/v1/models", answer)
    return False, f"/v1/models lists {ids}, not {args['served_name']!r}"


def check_completion(args: dict[str, Any]) -> tuple[bool, str]:
    body = {"model": args["served_name"], "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    answer = _get(args, "/v1/completions", body)
    if answer["status"] == 200:
        return True, "a one-token completion succeeded"
    return False, answer["error"] or _answered("/v1/completions", answer)


CHECKS = {"none": check_health, "health": check_models, "models": check_completion}


def main(args: dict[str, Any]) -> dict[str, Any]:
    text, offset = read_log(os.path.expanduser(args["log_path"]), int(args.get("offset", 0)))
    is_alive = alive(args["pid"], args["start_time"])
    stage = args.get("stage", "none")
    detail = ""
    while is_alive and stage in CHECKS:
        passed, detail = CHECKS[stage](args)
        if not passed:
            break
        stage = STAGES[STAGES.index(stage) + 1]
    return {"alive": is_alive, "log_text": text, "offset": offset, "stage": stage, "detail": detail}
