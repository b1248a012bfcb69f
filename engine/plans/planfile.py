"""The plan file: what `rigger plan` saw and would change, per host and task.

JSON, one object: ``format`` (``rigger-plan/1``), ``rigger_version``, ``created_at``
(unix seconds), ``salt`` (hex, for the sealed digests), ``inputs`` (the playbook path,
a digest per file read: playbook, includes, roles, vars files, inventory files; a digest
of the loaded inventory and of the extra vars), ``options`` (inventories, limit, tags)
and ``hosts``: for each host its ``steps`` in run order, each with the task, module,
location, status, message, what plan() said (``planned``: "", "unchanged", "change"),
the change's ``summary``, ``diffs`` (label, before, after and change lines) and
``fingerprint``. Secret-named values are masked; no_log steps keep only ``sealed``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import OptionsError, ValidationError

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
    read_only: bool = False  # a module that changes nothing (debug, assert, set_fact)

    @property
    def pending(self) -> bool:
        """A change the apply would make (read-only modules never count)."""
        return self.planned == "change" and not self.read_only


@dataclass(frozen=True)
class HostPlan:
    name: str
    steps: tuple[Step, ...] = ()

    @property
    def pending(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.pending)

    @property
    def failed(self) -> bool:
        return any(s.status in ("failed", "unreachable") for s in self.steps)


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

    def host(self, name: str) -> HostPlan | None:
        return next((h for h in self.hosts if h.name == name), None)

    def age_s(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.created_at


def dumps(plan: Plan) -> str:
    return json.dumps(asdict(plan), indent=1, default=str) + "\n"


def save(plan: Plan, path: str) -> None:
    """Written whole or not at all (temp file + rename), readable by its owner only."""
    target = Path(path)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dumps(plan))
        temp.replace(target)
    except OSError as exc:
        raise OptionsError(f"-o {path}: cannot write the plan: {exc.strerror or exc}") from None


def _steps(raw: list[dict[str, Any]]) -> tuple[Step, ...]:
    return tuple(
        Step(**{**s, "diffs": tuple(PlannedDiff(**{**d, "changes": tuple(d["changes"])}) for d in s["diffs"])})
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
