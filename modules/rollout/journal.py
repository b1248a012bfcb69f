"""The rollout record: the schedule, each host's turn (steps, gates with evidence, what was
rolled back), the failure budget and why it stopped. Kept in the controller's baseline
store and as a JSON file beside it (`rigger show FILE` renders it)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.module_api import BaselineStore
from modules.rollout.hoststep import HostTurn

KIND = "rigger-rollout"
DONE = ("upgraded",)


def schedule_text(
    batches: Sequence[Sequence[str]], gates: Sequence[str], max_fail: float, total: int, patched: bool = False
) -> str:
    lines = [f"batch {i + 1}{' (canary)' if i == 0 else ''}: {', '.join(b)}" for i, b in enumerate(batches)]
    steps = "measure, keep the config files, " + ("patch the checkpoint, " if patched else "") + "change"
    lines.append(f"per host: drain in HAProxy, wait for requests in flight, {steps}, gates: {', '.join(gates)}")
    lines.append(
        "a failed gate: the config files' previous bytes written back, the recorded previous server again, "
        "checked, re-admitted; the rollout stops"
    )
    lines.append(
        f"failure budget: max_fail_percentage {max_fail:g}% of {total} hosts, across batches; the canary never fails"
    )
    return "\n".join(lines) + "\n"


@dataclass
class Journal:
    rollout_id: str
    batches: list[list[str]]
    gates: list[str]
    max_fail_percentage: float
    started_at: float
    turns: list[HostTurn] = field(default_factory=list)
    outcome: str = "running"
    stop_reason_text: str | None = None
    finished_at: float | None = None
    path: Path | None = None
    engine_cache: dict[str, Any] | None = None  # what warmcache did after the canary, if asked

    @classmethod
    def start(cls, batches: Sequence[Sequence[str]], gates: Sequence[str], max_fail: float) -> Journal:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        return cls(
            f"rollout-{stamp}-{secrets.token_hex(3)}", [list(b) for b in batches], list(gates), max_fail, time.time()
        )

    def add(self, turn: HostTurn) -> None:
        self.turns.append(turn)

    @property
    def total(self) -> int:
        return sum(len(b) for b in self.batches)

    def failed(self) -> list[HostTurn]:
        return [t for t in self.turns if t.outcome not in DONE]

    def stop_reason(self, batch_index: int) -> str | None:
        failed = self.failed()
        if not failed:
            return None
        names = ", ".join(f"{t.host} ({t.outcome})" for t in failed)
        if batch_index == 0:
            return f"the canary failed: {names}"
        percent = len(failed) * 100.0 / self.total
        if percent > self.max_fail_percentage:
            return (f"{len(failed)} of {self.total} hosts failed ({percent:.0f}% > max_fail_percentage "
                    f"{self.max_fail_percentage:g}%): {names}")  # fmt: skip
        return None

    def finish(self, outcome: str, reason: str | None) -> None:
        self.outcome, self.stop_reason_text, self.finished_at = outcome, reason, time.time()

    def as_data(self) -> dict[str, Any]:
        done = {t.host for t in self.turns}
        return {
            "kind": KIND,
            "id": self.rollout_id,
            "outcome": self.outcome,
            "stop_reason": self.stop_reason_text,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "schedule": [{"batch": i + 1, "canary": i == 0, "hosts": b} for i, b in enumerate(self.batches)],
            "gates": self.gates,
            "failure_budget": {
                "max_fail_percentage": self.max_fail_percentage,
                "failed": len(self.failed()),
                "hosts": self.total,
            },
            "hosts": [t.as_data() for t in self.turns],
            "not_started": [h for b in self.batches for h in b if h not in done],
            "record_file": str(self.path) if self.path else None,
            "engine_cache": self.engine_cache,
        }

    def saved(self) -> dict[str, Any]:
        store = BaselineStore()
        self.path = store.path.parent / "rollouts" / f"{self.rollout_id}.json"
        data = self.as_data()  # names the record file, so the path is known before it is written
        store.record_rollout(self.rollout_id, self.outcome, data)
        return data

    def _evidence(self, turn: HostTurn) -> str:
        failed = [g for g in turn.gates if not g["passed"]]
        lines = [f"  {turn.host}: {turn.outcome}"]
        lines += [f"    gate {g['gate']} FAILED: {g['summary']}" for g in failed]
        if turn.rolled_back:
            back = turn.rolled_back
            lines.append(
                f"    back on spec {str(back.get('spec_hash'))[:12]} (pid {back.get('pid')}), checked and re-admitted"
            )
            restored = (back.get("files") or {}).get("restored")
            if restored:
                lines.append(f"    config files put back: {', '.join(restored)}")
        return "\n".join(lines)

    def failure_message(self) -> str:
        lines = [f"rollout {self.rollout_id} stopped: {self.stop_reason_text}"]
        lines += [self._evidence(t) for t in self.failed()]
        lines.append(f"record: rigger show {self.path}")
        return "\n".join(lines)

    def success_message(self) -> str:
        return (
            f"rollout {self.rollout_id}: {len(self.turns)} hosts upgraded, every gate passed (rigger show {self.path})"
        )
