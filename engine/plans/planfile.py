"""The plan file: what `rigger plan` saw and would change, per host and task.

JSON, one object: ``format`` (``rigger-plan/1``), ``rigger_version``, ``created_at``
(unix seconds), ``salt`` (hex, for the sealed digests), ``inputs`` (the playbook path,
a digest per file read: playbook, includes, roles, vars files, inventory files; a digest
of the loaded inventory and of the extra vars), ``options`` (inventories, limit, tags)
and ``hosts``: for each host its ``steps`` in run order, each with the task, module,
location, status, message, what plan() said (``planned``: "", "unchanged", "change"),
the change's ``summary``, ``diffs`` (label, before, after and change lines),
``fingerprint``, ``impact`` (what it stops and starts, with argv), ``warnings`` and, for a
step planned "after-apply", ``depends_on`` (the task whose apply decides it). Secret-named
values are masked; no_log steps keep only ``sealed``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine import mask
from engine.errors import OptionsError, ValidationError
from engine.probes.fileio import write_atomic

FORMAT = "rigger-plan/1"


@dataclass(frozen=True)
class PlannedDiff:
    label: str
    before: str
    after: str
    changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    task: str
    module: str
    location: str
    status: str
    msg: str = ""
    planned: str = ""
    summary: str = ""
    diffs: tuple[PlannedDiff, ...] = ()
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    item: Any = None
    no_log: bool = False
    sealed: str = ""
    read_only: bool = False  # a module that changes nothing (debug, assert, set_fact, check_serving)
    depends_on: str = ""  # planned "after-apply": the earlier task whose apply decides this plan
    impact: tuple[str, ...] = ()  # "stops vLLM pid 4242 ...", "then starts NAME on port P with argv ..."
    warnings: tuple[str, ...] = ()  # findings, shown as the reasons for a later change

    @property
    def pending(self) -> bool:
        """A change the apply would make (read-only modules never count)."""
        return self.planned == "change" and not self.read_only

    @property
    def after_apply(self) -> bool:
        """Planned from what an earlier step produces only when applied (known after apply)."""
        return self.planned == "after-apply" and not self.read_only


@dataclass(frozen=True)
class HostPlan:
    name: str
    steps: tuple[Step, ...] = ()

    @property
    def pending(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.pending)

    @property
    def after_apply(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.after_apply)

    @property
    def failed(self) -> bool:
        return any(s.status in ("failed", "unreachable") for s in self.steps)

    def applicable(self) -> tuple[Step, ...]:
        """The steps apply may make: pending or known after apply, none planned after a
        failure on this host (a partial plan's later steps were planned from a host the
        failed step did not bring to its state)."""
        found = []
        for step in self.steps:
            if step.status in ("failed", "unreachable"):
                break
            if step.pending or step.after_apply:
                found.append(step)
        return tuple(found)


@dataclass(frozen=True)
class Inputs:
    playbook: str
    files: Mapping[str, str]
    inventory: str
    extra_vars: str


@dataclass(frozen=True)
class Options:
    inventories: tuple[str, ...] = ()
    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    rigger_version: str
    created_at: float
    salt: str
    inputs: Inputs
    options: Options
    hosts: tuple[HostPlan, ...]
    exit_code: int = 0
    format: str = FORMAT

    @property
    def pending(self) -> int:
        return sum(len(h.pending) for h in self.hosts)

    @property
    def failed_hosts(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts if h.failed)

    def host(self, name: str) -> HostPlan | None:
        return next((h for h in self.hosts if h.name == name), None)

    def age_s(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.created_at


def dumps(plan: Plan) -> str:
    return mask.dumps(asdict(plan), indent=1, default=str) + "\n"


def save(plan: Plan, path: str) -> None:
    """Written whole or not at all (temp file + rename), readable by its owner only."""
    # the guarded write: random temp name created O_EXCL|O_NOFOLLOW, renamed over the
    # target (a planted symlink there is replaced, never written through)
    try:
        write_atomic(os.path.abspath(path), dumps(plan).encode("utf-8"), 0o600)
    except OSError as exc:
        raise OptionsError(f"-o {path}: cannot write the plan: {exc.strerror or exc}") from None


def _steps(raw: list[dict[str, Any]]) -> tuple[Step, ...]:
    return tuple(
        Step(
            **{
                **s,
                "diffs": tuple(PlannedDiff(**{**d, "changes": tuple(d["changes"])}) for d in s["diffs"]),
                "impact": tuple(s.get("impact", ())),
                "warnings": tuple(s.get("warnings", ())),
            }
        )
        for s in raw
    )


def _options(raw: Mapping[str, Any]) -> Options:
    return Options(
        inventories=tuple(raw["inventories"]),
        limit=raw["limit"],
        tags=tuple(raw["tags"]),
        skip_tags=tuple(raw["skip_tags"]),
    )


def load(path: str) -> Plan:
    """A plan file, or a clear error naming the file and what is wrong with it."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValidationError("plan file not found", file=path) from None
    except (OSError, ValueError) as exc:
        raise ValidationError(f"not a readable plan file: {exc}", file=path) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ValidationError(f"not a rigger plan (format {found!r}, expected {FORMAT!r})", file=path)
    try:
        return Plan(
            rigger_version=raw["rigger_version"],
            created_at=float(raw["created_at"]),
            salt=raw["salt"],
            inputs=Inputs(**raw["inputs"]),
            options=_options(raw["options"]),
            hosts=tuple(HostPlan(h["name"], _steps(h["steps"])) for h in raw["hosts"]),
            exit_code=int(raw.get("exit_code", 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError(f"damaged plan file: {type(exc).__name__}: {exc}", file=path) from None
