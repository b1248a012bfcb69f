"""`rigger show ROLLOUT.json`: a rollout record rendered for review, like a plan: the
schedule, then each host's turn with its gates' evidence and what was rolled back.

A record holds host text (a vLLM log line, a model's answer, a step's detail): each line is
rendered through the one renderer (engine/hosttext.py) for its format: escaped on the
terminal, escaped in html, inside a markdown fence it cannot close."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.hosttext import html as escape
from engine.hosttext import md_fence, terminal_lines

KIND = "rigger-rollout"


def load(path: str) -> dict[str, Any] | None:
    """The record, when the file is one (a plan file or anything else: None)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("kind") == KIND else None


def _gate(gate: Mapping[str, Any]) -> list[str]:
    mark = "passed" if gate.get("passed") else "FAILED"
    lines = [f"    gate {gate.get('gate')}: {mark}: {gate.get('summary')}"]
    evidence = gate.get("evidence") or {}
    for verdict in evidence.get("verdicts") or []:
        lines.append(
            f"      {verdict['figure']}: {verdict['value']} (baseline median {verdict['baseline_median']}, "
            f"spread {verdict['spread']}, limit {verdict['allowed']}){' WORSE' if verdict['worse'] else ''}"
        )
    for diff in evidence.get("differing") or []:
        lines.append(f"      prompt {diff['prompt']!r}: before {diff['before']!r}, after {diff['after']!r}")
    if evidence.get("fatal_line"):
        lines.append(f"      log: {evidence['fatal_line']}")
    return lines


def _host(turn: Mapping[str, Any]) -> list[str]:
    lines = [f"  {turn.get('host')}: {turn.get('outcome')}"]
    for step in turn.get("steps") or []:
        details = ", ".join(f"{k} {v}" for k, v in step.items() if k not in ("step", "at") and v is not None)
        lines.append(f"    - {step.get('step')}{': ' + details if details else ''}")
    for gate in turn.get("gates") or []:
        lines += _gate(gate)
    back = turn.get("rolled_back")
    if back:
        lines.append(
            f"    rolled back to spec {str(back.get('spec_hash'))[:12]}, pid {back.get('pid')}, "
            f"ready in {back.get('ready_s')}s"
        )
    return lines


def _lines(record: Mapping[str, Any]) -> list[str]:
    budget = record.get("failure_budget") or {}
    lines = [
        f"rollout {record.get('id')}: {record.get('outcome')}",
        *([f"stopped: {record['stop_reason']}"] if record.get("stop_reason") else []),
        f"gates: {', '.join(record.get('gates') or [])}",
        f"failure budget: {budget.get('failed')} of {budget.get('hosts')} hosts failed "
        f"(max_fail_percentage {budget.get('max_fail_percentage')}%)",
        "schedule:",
    ]
    for batch in record.get("schedule") or []:
        lines.append(
            f"  batch {batch['batch']}{' (canary)' if batch.get('canary') else ''}: {', '.join(batch['hosts'])}"
        )
    lines.append("hosts:")
    for turn in record.get("hosts") or []:
        lines += _host(turn)
    if record.get("not_started"):
        lines.append(f"not started: {', '.join(record['not_started'])}")
    return lines


def text(record: Mapping[str, Any]) -> str:
    return terminal_lines(_lines(record)) + "\n"


def markdown(record: Mapping[str, Any]) -> str:
    return "\n".join(md_fence(_lines(record))) + "\n"


def html(record: Mapping[str, Any]) -> str:
    title = escape(f"rigger rollout {record.get('id')}")
    body = "\n".join(escape(line) for line in _lines(record))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body><h1>{title}</h1><pre>{body}</pre></body></html>\n"
    )
