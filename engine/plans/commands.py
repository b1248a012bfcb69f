"""`rigger plan`, `rigger show` and `rigger apply`, called by the CLI (which exits)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import __version__, templating
from engine.connection.warm import WarmConnections
from engine.errors import EXIT_ERROR, EXIT_OK, EXIT_TASK_FAILED, OptionsError, RiggerError
from engine.inventory import inline_hosts, load_inventory, require_limit_matches, select_hosts, targeted_connections
from engine.model import Inventory, Playbook, host_patterns
from engine.output.events import Event, Notice, Sink
from engine.plans import planfile
from engine.plans.gate import ApplyGate
from engine.plans.html import html
from engine.plans.planfile import Inputs, Options, Plan
from engine.plans.recorder import Masking, PlanRecorder
from engine.plans.render import markdown, text
from engine.plans.review import review
from engine.plans.secrets import Scrubber, sealed
from engine.playbook import hostcheck, static_check
from engine.playbook.loader import load_playbook
from engine.run.runner import Runner, RunOptions
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
    lock_wait_s: float | None = None


class Tee:
    def __init__(self, *sinks: Sink):
        self._sinks = sinks

    def emit(self, event: Event) -> None:
        for sink in self._sinks:
            sink.emit(event)

    def close(self) -> None:
        for sink in self._sinks:
            sink.close()


def normalised(request: Request) -> Request:
    """The one place paths are made absolute: the playbook (so task locations, which the
    apply gate matches on, read the same from any working directory) and the inventories.
    Digests of the files read are keyed by resolved path in engine.yamlload."""
    return replace(
        request,
        playbook=str(Path(request.playbook).resolve()),
        # a host list (`-i gpu01,gpu02`) is names, not a path
        inventories=tuple(p if inline_hosts(p) is not None else str(Path(p).resolve()) for p in request.inventories),
    )


def loaded(request: Request) -> tuple[Playbook, Inventory]:
    """The playbook and inventory of the request (normalised here too), checked."""
    request = normalised(request)
    book = load_playbook(request.playbook)
    inventory = load_inventory(request.inventories, playbook_dir=Path(request.playbook).parent)
    static_check.check(book, inventory, request.extra_vars)
    require_limit_matches(inventory, request.limit)
    targeted_connections(inventory, host_patterns(book), request.limit)  # refuses; plans warn of nothing else
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
    """The secrets of the inventory, the plays and ``-e`` recorded in the one mask before
    any output: literal ones, and templated ones rendered per host where that is safe."""
    plays = _play_vars(book)
    for host in inventory.hosts.values():
        for variables in plays:
            templating.record_secrets({**host.vars, **variables, **extra_vars})
        templating.record_secrets({**host.vars, **extra_vars})
    return Scrubber.from_vars([*(h.vars for h in inventory.hosts.values()), *plays, extra_vars])


def _file_digest(salt: bytes, data: bytes) -> str:
    return sealed(salt, hashlib.sha256(data).hexdigest())


def _inputs(request: Request, inventory: Inventory, salt: bytes) -> Inputs:
    return Inputs(
        playbook=request.playbook,
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
        lock_wait_s=request.lock_wait_s,
    )


# ---- plan ---------------------------------------------------------------------------


def make_plan(request: Request, out: str, display: Sink, warm: WarmConnections | None = None) -> Plan:
    """Run the playbook in check mode and save what it would change to ``out``."""
    folder = Path(out).resolve().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise OptionsError(f"-o {out}: {folder} is not a writable directory")
    request = normalised(request)
    book, inventory = loaded(request)
    for warning in [
        *static_check.unused_extra_vars(book, inventory, request.extra_vars),
        *hostcheck.warnings(book, inventory, request.limit),
    ]:
        display.emit(Notice("warning", warning))
    salt = os.urandom(16)
    recorder = PlanRecorder(Masking(scrubber_for(book, inventory, request.extra_vars), salt))
    tee = Tee(display, recorder)
    runner = Runner(inventory, _run_options(request, check_mode=True), tee.emit, warm=warm)
    code = runner.run(book)
    plan = Plan(
        rigger_version=__version__,
        created_at=time.time(),
        salt=salt.hex(),
        inputs=_inputs(request, inventory, salt),
        options=Options(
            inventories=request.inventories,
            limit=request.limit,
            tags=tuple(sorted(request.tags)),
            skip_tags=tuple(sorted(request.skip_tags)),
        ),
        hosts=recorder.hosts(),
        exit_code=code,
    )
    planfile.save(plan, out)
    rev = review(plan)
    if rev.incomplete:
        display.emit(Notice("warning", rev.incomplete))
    display.emit(Notice("info", f"plan saved to {out}: {rev.headline()}"))
    display.close()
    return plan


def plan_exit_code(plan: Plan, detailed: bool) -> int:
    """As `rigger run` exits (2 a task failed, 3 unreachable); with --detailed-exitcode,
    10 when changes are pending on a plan that is whole."""
    if plan.exit_code != EXIT_OK:
        return plan.exit_code
    if plan.failed_hosts:  # a failure ignored by the run still leaves those hosts unplanned
        return EXIT_TASK_FAILED
    return EXIT_CHANGES_PENDING if detailed and (plan.pending or _later(plan)) else EXIT_OK


def _later(plan: Plan) -> int:
    return sum(len(h.after_apply) for h in plan.hosts)


# ---- show ---------------------------------------------------------------------------

RENDERERS = {"text": text, "markdown": markdown, "html": html}


def show(path: str, fmt: str) -> tuple[str, int]:
    """The review, and the exit code: non-zero for a plan in which hosts failed."""
    plan = planfile.load(path)
    code = (plan.exit_code or EXIT_TASK_FAILED) if plan.failed_hosts else EXIT_OK
    return RENDERERS[fmt](review(plan)), code


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
            f"{path}: the plan is {human_duration(age)} old, older than --max-age {human_duration(max_age_s)}:"
            " plan again (or give apply a larger --max-age)"
        )
    if age < -300:
        raise PlanRefused(f"{path}: the plan was made {-age:.0f}s in the future (clock skew?)")


@dataclass(frozen=True)
class ApplyOptions:
    """How `rigger apply` runs: -e, --max-age, --on-drift all, --limit, --lock-wait."""

    extra_vars: Mapping[str, Any]
    max_age_s: float
    stop_all: bool = False
    limit: str | None = None
    lock_wait_s: float | None = None
    forks: int = 10
    verbosity: int = 0


def request_of(plan: Plan, options: ApplyOptions) -> Request:
    return Request(
        playbook=plan.inputs.playbook,
        inventories=plan.options.inventories,
        extra_vars=options.extra_vars,
        limit=plan.options.limit,
        tags=frozenset(plan.options.tags),
        skip_tags=frozenset(plan.options.skip_tags),
        forks=options.forks,
        verbosity=options.verbosity,
        lock_wait_s=options.lock_wait_s,
    )


def _limited(plan: Plan, path: str, request: Request, inventory: Inventory, limit: str | None) -> Request:
    """The hosts to apply: the plan's, narrowed by apply's --limit. An incomplete plan
    (hosts failed while planning) is applied only to hosts named with --limit."""
    failed = plan.failed_hosts
    if failed and not limit:
        raise PlanRefused(
            f"{path}: INCOMPLETE: {len(failed)} host(s) failed while planning ({', '.join(failed)}); nothing "
            f"applied. Plan again, or apply to the hosts you name: --limit 'all:!{':!'.join(failed)}'"
        )
    if not limit:
        return request
    require_limit_matches(inventory, limit)
    planned = {h.name for h in plan.hosts}
    chosen = [h for h in select_hosts(inventory, "all", limit) if h in planned]
    if not chosen:
        raise PlanRefused(f"{path}: --limit {limit!r} names no host of the plan ({', '.join(sorted(planned))})")
    return replace(request, limit=",".join(chosen))


def apply_plan(path: str, display: Sink, options: ApplyOptions) -> int:
    """Re-plan every task just before applying it; apply only what was reviewed."""
    plan = planfile.load(path)
    _check_plan(plan, path, options.max_age_s)
    request = normalised(request_of(plan, options))
    book, inventory = loaded(request)
    request = _limited(plan, path, request, inventory, options.limit)
    extra_vars, stop_all = options.extra_vars, options.stop_all
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


def human_duration(seconds: float) -> str:
    """``parse_age``'s inverse for people: 1s, 1m 30s, 2h 5m, 1d 1h (the two largest units)."""
    if seconds < 1:
        return f"{seconds:.1f}s"
    left, parts = round(seconds), []
    for unit, size in sorted(_UNITS.items(), key=lambda item: -item[1]):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join(parts[:2])


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
