"""`rigger show ROLLOUT.json`: a rollout record rendered for review, like a plan: the
schedule, then each host's turn with its gates' evidence and what was rolled back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def text(record: Mapping[str, Any]) -> str:
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
    return "\n".join(lines) + "\n"


def markdown(record: Mapping[str, Any]) -> str:
    return "```\n" + text(record) + "```\n"
