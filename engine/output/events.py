"""Events the runner emits; sinks (console, jsonl) turn them into output."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from engine.module_api import Diff

COUNTERS = ("ok", "changed", "failed", "skipped", "unreachable", "rescued", "ignored")
HIDDEN = "the output has been hidden due to no_log: true"


class Status(StrEnum):
    """What a task did on a host (Ansible's words; equal to the plain strings in output)."""

    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class PlayStarted:
    name: str
    hosts: tuple[str, ...]
    check_mode: bool


@dataclass(frozen=True)
class TaskStarted:
    name: str
    module: str
    location: str
    handler: bool = False


@dataclass(frozen=True)
class HostResult:
    host: str
    task: str
    status: Status
    changed: bool
    msg: str = ""
    diffs: tuple[Diff, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    duration_s: float = 0.0
    item: Any = None
    ignored: bool = False
    no_log: bool = False
    location: str = ""
    # What plan() said, for saved plans (engine/plans): "" (not reached), "unchanged" or
    # "change", the change's summary and the fingerprint of the state it depends on.
    planned: str = ""
    summary: str = ""
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    # "after-apply": the earlier task whose output this task's plan waits for.
    depends_on: str = ""
    # What the change does to running things: "stops vLLM pid 4242 ...", "starts ... argv".
    impact: tuple[str, ...] = ()
    change_kind: str = ""  # the Change's ``kind`` ("down", "spec"): what class of change it is
    # the task's ``diff`` keyword: False hides its diffs from every output (they may hold the
    # content written, a credential); True shows them without --diff; None: as --diff says
    diff: bool | None = None

    def masked(self) -> HostResult:
        if not self.no_log:
            return replace(self, diffs=()) if self.diff is False else self
        return HostResult(
            host=self.host,
            task=self.task,
            status=self.status,
            changed=self.changed,
            msg=HIDDEN,
            diffs=(),
            data={"censored": HIDDEN},
            warnings=self.warnings,
            duration_s=self.duration_s,
            item=None,
            ignored=self.ignored,
            no_log=True,
            location=self.location,
            planned=self.planned,
            depends_on=self.depends_on,
            change_kind=self.change_kind,
            diff=self.diff,
        )


@dataclass(frozen=True)
class TaskFinished:
    name: str


@dataclass(frozen=True)
class Progress:
    host: str
    task: str
    message: str


@dataclass(frozen=True)
class Notice:
    level: str
    message: str
    host: str | None = None


@dataclass(frozen=True)
class Recap:
    stats: Mapping[str, Mapping[str, int]]
    duration_s: float
    check_mode: bool
    stopped: Mapping[str, str] = field(default_factory=dict)
    # host -> why it is quarantined on the controller (engine/run/quarantine.py)
    quarantined: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Interruption:
    """The run was stopped by a signal (docs/safety.md, "Interruption"): no task started
    after it, the commands rigger started were ended, the run locks released.

    ``in_flight``: host -> the task that was running there; ``touched``: host -> what that
    task had already done that may change the host (it counts as changed in the recap);
    ``left_running``: host -> detached servers left starting by design (their state file
    says "starting": the next run waits for them)."""

    signal: str
    in_flight: Mapping[str, str] = field(default_factory=dict)
    touched: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    left_running: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


Event = PlayStarted | TaskStarted | HostResult | TaskFinished | Progress | Notice | Interruption | Recap


class Sink(Protocol):
    def emit(self, event: Event) -> None: ...

    def close(self) -> None: ...
