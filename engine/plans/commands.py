"""`rigger plan`, `rigger show` and `rigger apply`, called by the CLI (which exits)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import __version__, static_check
from engine.errors import EXIT_ERROR, EXIT_OK, OptionsError, RiggerError
from engine.inventory import load_inventory
from engine.loader import load_playbook
from engine.output.events import Event, Notice, Sink
from engine.plans import planfile
from engine.plans.gate import ApplyGate
from engine.plans.html import html
from engine.plans.planfile import Inputs, Options, Plan
from engine.plans.recorder import Masking, PlanRecorder
from engine.plans.render import markdown, text
from engine.plans.review import review
from engine.plans.secrets import Scrubber, sealed
from engine.playbook import Inventory, Playbook
from engine.runner import Runner, RunOptions
from engine.yamlload import files_read, load_file

# `rigger plan --detailed-exitcode` when changes are pending. Not 2 (Ansible's and
# rigger's "a task failed"; Terraform's "changes" would read as a failure to scripts
# that wrap ansible-playbook) and none of ansible-playbook's codes (0-5, 8, 99, 250).
EXIT_CHANGES_PENDING = 10


class PlanRefused(RiggerError):
    """The saved plan cannot be applied as a whole (inputs changed, too old, another rigger)."""

    exit_code = EXIT_ERROR


@dataclass(frozen=True)
class Request:
    """What the user asked to plan or apply: the playbook and its inputs."""

    playbook: str
    inventories: tuple[str, ...]
    extra_vars: Mapping[str, Any]
    limit: str | None = None
    tags: frozenset[str] = frozenset()
    skip_tags: frozenset[str] = frozenset()
    forks: int = 10
    verbosity: int = 0


class Tee:
    def __init__(self, *sinks: Sink):
        self._sinks = sinks

    def emit(self, event: Event) -> None:
        for sink in self._sinks:
            sink.emit(event)

    def close(self) -> None:
        for sink in self._sinks:
            sink.close()


def _loaded(request: Request) -> tuple[Playbook, Inventory]:
    book = load_playbook(request.playbook)
    inventory = load_inventory(request.inventories)
    static_check.check(book, inventory, request.extra_vars)
    return book, inventory


def _inventory_material(inventory: Inventory) -> dict[str, Any]:
    return {
        "hosts": {
            name: {"vars": dict(h.vars), "groups": list(h.groups)} for name, h in sorted(inventory.hosts.items())
        },
        "groups": {name: list(members) for name, members in sorted(inventory.groups.items())},
    }


def _play_vars(book: Playbook) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for play in book.plays:
        found.append(play.vars)
        for path in play.vars_files:
            data = load_file(path)
            if isinstance(data, Mapping):
                found.append(data)
    return found


def scrubber_for(book: Playbook, inventory: Inventory, extra_vars: Mapping[str, Any]) -> Scrubber:
    host_vars = [h.vars for h in inventory.hosts.values()]
    return Scrubber.from_vars([*host_vars, *_play_vars(book), extra_vars])


def _file_digest(salt: bytes, data: bytes) -> str:
    return sealed(salt, hashlib.sha256(data).hexdigest())


def _inputs(request: Request, inventory: Inventory, salt: bytes) -> Inputs:
    return Inputs(
        playbook=str(Path(request.playbook).resolve()),
        files={path: _file_digest(salt, data) for path, data in sorted(files_read().items())},
        inventory=sealed(salt, _inventory_material(inventory)),
        extra_vars=sealed(salt, dict(request.extra_vars)),
    )


def _run_options(request: Request, check_mode: bool, gate: ApplyGate | None = None) -> RunOptions:
    return RunOptions(
        check_mode=check_mode,
        diff=True,
        limit=request.limit,
        tags=request.tags,
        skip_tags=request.skip_tags,
        forks=request.forks,
        extra_vars=request.extra_vars,
        verbosity=request.verbosity,
        before_apply=gate,
    )


# ---- plan ---------------------------------------------------------------------------


def make_plan(request: Request, out: str, display: Sink) -> Plan:
    """Run the playbook in check mode and save what it would change to ``out``."""
    folder = Path(out).resolve().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise OptionsError(f"-o {out}: {folder} is not a writable directory")
    book, inventory = _loaded(request)
    salt = os.urandom(16)
    recorder = PlanRecorder(Masking(scrubber_for(book, inventory, request.extra_vars), salt))
    tee = Tee(display, recorder)
    runner = Runner(inventory, _run_options(request, check_mode=True), tee.emit)
    code = runner.run(book)
    plan = Plan(
        rigger_version=__version__,
        created_at=time.time(),
        salt=salt.hex(),
        inputs=_inputs(request, inventory, salt),
        options=Options(
            inventories=tuple(str(Path(p).resolve()) for p in request.inventories),
            limit=request.limit,
            tags=tuple(sorted(request.tags)),
            skip_tags=tuple(sorted(request.skip_tags)),
        ),
        hosts=recorder.hosts(),
        exit_code=code,
    )
    planfile.save(plan, out)
    rev = review(plan)
    display.emit(Notice("info", f"plan saved to {out}: {rev.headline()}"))
    display.close()
    return plan


def plan_exit_code(plan: Plan, detailed: bool) -> int:
    if plan.exit_code != EXIT_OK:
        return plan.exit_code
    return EXIT_CHANGES_PENDING if detailed and plan.pending else EXIT_OK


# ---- show ---------------------------------------------------------------------------

RENDERERS = {"text": text, "markdown": markdown, "html": html}


def show(path: str, fmt: str) -> str:
    return RENDERERS[fmt](review(planfile.load(path)))


# ---- apply --------------------------------------------------------------------------


def _input_differences(plan: Plan, request: Request, inventory: Inventory) -> list[str]:
    salt = bytes.fromhex(plan.salt)
    found = []
    for path, digest in plan.inputs.files.items():
        try:
            data = Path(path).read_bytes()
        except OSError:
            found.append(f"{path}: gone since the plan")
            continue
        if _file_digest(salt, data) != digest:
            found.append(f"{path}: edited since the plan")
    found += [f"{path}: read now, not when planning" for path in files_read() if path not in plan.inputs.files]
    if sealed(salt, _inventory_material(inventory)) != plan.inputs.inventory:
        found.append("the inventory (hosts, groups or their variables) differs from the plan's")
    if sealed(salt, dict(request.extra_vars)) != plan.inputs.extra_vars:
        found.append("the extra vars (-e) differ from the plan's: give apply the same -e as plan")
    return found


def _check_plan(plan: Plan, path: str, max_age_s: float) -> None:
    if plan.rigger_version != __version__:
        raise PlanRefused(f"{path}: made by rigger {plan.rigger_version}, this is {__version__}: plan again")
    age = plan.age_s()
    if age > max_age_s:
        raise PlanRefused(
            f"{path}: the plan is {age / 3600:.1f} h old, older than --max-age {max_age_s / 3600:g} h: plan again"
        )
    if age < -300:
        raise PlanRefused(f"{path}: the plan was made {-age:.0f}s in the future (clock skew?)")


def request_of(plan: Plan, extra_vars: Mapping[str, Any], forks: int, verbosity: int) -> Request:
    return Request(
        playbook=plan.inputs.playbook,
        inventories=plan.options.inventories,
        extra_vars=extra_vars,
        limit=plan.options.limit,
        tags=frozenset(plan.options.tags),
        skip_tags=frozenset(plan.options.skip_tags),
        forks=forks,
        verbosity=verbosity,
    )


def apply_plan(
    path: str, extra_vars: Mapping[str, Any], display: Sink, *, max_age_s: float, stop_all: bool,
    forks: int = 10, verbosity: int = 0,
) -> int:  # fmt: skip
    """Re-plan every task just before applying it; apply only what was reviewed."""
    plan = planfile.load(path)
    _check_plan(plan, path, max_age_s)
    request = request_of(plan, extra_vars, forks, verbosity)
    book, inventory = _loaded(request)
    changed_inputs = _input_differences(plan, request, inventory)
    if changed_inputs:
        raise PlanRefused(
            f"{path}: the inputs changed since the plan, nothing applied:\n  " + "\n  ".join(changed_inputs)
        )
    masking = Masking(scrubber_for(book, inventory, extra_vars), bytes.fromhex(plan.salt))
    gate = ApplyGate(plan, masking, stop_all=stop_all)
    runner = Runner(inventory, _run_options(request, check_mode=False, gate=gate), display.emit)
    code = runner.run(book)
    for message in _apply_notes(gate):
        display.emit(Notice("info", message))
    display.close()
    return code


def _apply_notes(gate: ApplyGate) -> Sequence[str]:
    notes = [f"applied {len(gate.report.applied)} reviewed changes"]
    # The refusal in full: a no_log task's failure line is hidden, this says only what differs.
    notes += [f"[{host}] refused: {why}" for host, why in gate.report.refused.items()]
    for host, steps in gate.not_applied().items():
        for step in steps:
            notes.append(f"[{host}] not applied: {step.task}: {step.summary or '(no_log)'}")
    return notes


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """``--max-age``: seconds, or a number with s, m, h or d."""
    value, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        seconds = float(value) * _UNITS[unit]
    except ValueError:
        raise OptionsError(f"--max-age {text!r}: expected e.g. 3600, 90m, 24h or 2d") from None
    if seconds <= 0:
        raise OptionsError(f"--max-age {text!r}: must be more than 0")
    return seconds
