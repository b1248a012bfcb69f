"""One task on one host: when, loop, args, plan/apply, retries/until, register."""

from __future__ import annotations

import shlex
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine import controller_files, registry, schema_words, templating
from engine.connection.base import Connection, ScopedConnection, TaskScope, become_target
from engine.connection.predicted import PredictedHost
from engine.errors import HostUnreachable, TaskFailed, TemplateError, pause_unless_stopped
from engine.mask import MASK, answers
from engine.model import Task, TaskOptions
from engine.module_api import Change, Diff, Effect, Result, Starts, Stops, TaskContext, Unchanged
from engine.output.events import HostResult, Status
from engine.playbook import loops
from engine.probes import ProbeError
from engine.run import checkmode, permissions, quarantine, task_numbers
from engine.templating.filters import to_bool
from engine.templating.omit import without_omitted


@dataclass(frozen=True)
class PlannedStep:
    """What plan() returned for one task (or loop item) on one host, before any apply."""

    host: str
    location: str
    module: str
    check_mode: str
    no_log: bool
    change: Change | Unchanged | None
    hide_diff: bool = False  # the task says ``diff: false``: its diffs are kept only sealed


@dataclass(frozen=True)
class ExecOptions:
    check_mode: bool = False
    verbosity: int = 0
    # Called after every plan() outside check mode; raising TaskFailed stops the task
    # before apply (the saved-plan gate of `rigger apply`, engine/plans/gate.py).
    before_apply: Callable[[PlannedStep], None] | None = None
    # Another inventory host's connection, for TaskContext.peer (the runner's delegate_to).
    connect: Callable[[str], Connection] | None = None
    # The run's stop flag: set, the task stops before its next command (engine/run/interrupt.py).
    stop: threading.Event | None = None
    # ansible.cfg's become_user: below the keyword and the ansible_become_user variable
    become_user: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What one task did on one host, after loops and conditions."""

    results: tuple[HostResult, ...]
    status: Status
    registered: Mapping[str, Any]
    set_vars: Mapping[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.status == Status.CHANGED


NO_ITEMS = "No items in the list"


def loop_items(task: Task, scope: templating.Scope) -> list[Any]:
    """The task's loop rendered and shaped (``with_dict``, ``with_items``...)."""
    try:
        return loops.items(task.loop_kind, templating.render(task.loop, scope), scope, task.module)
    except ValueError as exc:
        raise TemplateError(str(exc)) from None


def _command_output(data: Mapping[str, Any]) -> dict[str, Any]:
    """Ansible's shape of a command's output: trailing newlines stripped, ``*_lines`` too."""
    shaped = dict(data)
    for stream in ("stdout", "stderr"):
        text = shaped.get(stream)
        if isinstance(text, str):
            shaped[stream] = text.rstrip("\r\n")
            shaped[f"{stream}_lines"] = shaped[stream].splitlines()
    return shaped


def _registered(result: HostResult) -> dict[str, Any]:
    return {
        **_command_output(result.data),
        "changed": result.changed,
        "failed": result.status == Status.FAILED,
        "skipped": result.status == Status.SKIPPED,
        "unreachable": result.status == Status.UNREACHABLE,
        "msg": result.msg,
    }


@dataclass(frozen=True)
class _Attempt:
    """A module's Result (or the engine's verdict) as the task status it leads to: the
    status says failed (a Result's ``failed`` is read once, in ``_from_result``).

    ``planned`` / ``summary`` / ``fingerprint`` / ``impact``: what plan() said, for saved
    plans; ``depends_on``: the earlier task a "known after apply" plan waits for."""

    status: Status
    changed: bool
    msg: str = ""
    diffs: tuple[Diff, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    set_vars: Mapping[str, Any] = field(default_factory=dict)
    planned: str = ""
    summary: str = ""
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    depends_on: str = ""
    impact: tuple[str, ...] = ()
    change_kind: str = ""


def _failed(msg: str, data: Mapping[str, Any] | None = None) -> _Attempt:
    return _Attempt(status=Status.FAILED, changed=False, msg=msg, data=dict(data or {}))


# Arguments that are expressions, evaluated by their module: never rendered first (that would
# splice what a host printed into an expression). ansible-core 2.19's rules, below.
EXPRESSION_ARGS = {"debug": "var", "assert": "that"}


def _rendered_args(task: Task, scope: templating.Scope) -> Any:
    """The task's arguments rendered, its expression argument checked instead (TemplateError);
    an argument that renders to ``omit`` is left out."""
    key = EXPRESSION_ARGS.get(task.module)
    if key is None or not isinstance(task.args, Mapping) or key not in task.args:
        return without_omitted(templating.render(task.args, scope))
    rest = without_omitted(templating.render({k: v for k, v in task.args.items() if k != key}, scope))
    return {**rest, key: _expression(task, key, task.args[key], scope)}


def _expression(task: Task, key: str, value: Any, scope: templating.Scope) -> Any:
    """``assert: that:`` with ``{{ }}`` inside the expression is refused (Ansible: template
    delimiters are not supported in expressions); ``debug: var: "{{ name_var }}"`` names its expression
    through a template, allowed only when that reads no host data (Ansible: "untrusted")."""
    if key == "that":
        for condition in value if isinstance(value, list) else [value]:
            if templating.is_template(condition) and not _parses_as_condition(condition):
                raise TemplateError(
                    f"assert: {condition!r}: template delimiters are not supported in expressions "
                    "(write the condition without {{ }})"
                )
        return value
    if not templating.is_template(value):
        return value
    trusted_items = {task.loop_var, task.index_var} if task.loop is not None and isinstance(task.loop, list) else set()
    untrusted = sorted(n for n in templating.names_in(value) if scope.from_host(n) and n not in trusted_items)
    if untrusted:
        raise TemplateError(
            f"debug: var: {value!r}: encountered an untrusted template or expression ({untrusted[0]} came "
            "from a host): expressions must be written in the playbook, not built from module results"
        )
    return templating.render(value, scope)


def _expanded_paths(spec: registry.ModuleSpec, ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    """``~`` and ``$VAR`` in the module's host path arguments, expanded on the host as the
    task's user (one read-only round trip, only when a path has them)."""
    wanted = [key for key in spec.host_paths if isinstance(args.get(key), str) and _expandable(args[key])]
    if not wanted:
        return args
    answer = ctx.conn.run_probe("expand_paths", {"paths": [args[key] for key in wanted]})
    return {**args, **dict(zip(wanted, answer["paths"], strict=True))}


def _expandable(path: str) -> bool:
    return path.startswith("~") or "$" in path


def _parses_as_condition(condition: Any) -> bool:
    """``{{ x }}`` alone, or braces inside string literals, still parse as a condition."""
    try:
        templating.check_condition_syntax(condition)
    except TemplateError:
        return False
    return True


def merged_environment(layers: tuple[Any, ...], scope: Mapping[str, Any]) -> dict[str, Any]:
    """The play's, blocks' and task's ``environment:`` rendered and merged, inner winning.
    TemplateError when one does not render to a mapping."""
    merged: dict[str, Any] = {}
    for layer in layers:
        value = templating.render(layer, scope)
        if not isinstance(value, Mapping):
            raise TemplateError(f"environment must be a mapping of variables, not {value!r}")
        merged.update(value)
    return merged


def no_log_of(options: TaskOptions, scope: Mapping[str, Any]) -> bool:
    """``no_log``, rendered when it is a template; one that does not render hides (the safe side)."""
    flag = options.no_log
    if isinstance(flag, str):
        try:
            return to_bool(templating.render(flag, scope))
        except TemplateError:
            return True
    return bool(flag)


def diff_of(options: TaskOptions, scope: Mapping[str, Any]) -> bool | None:
    """``diff``, rendered when it is a template (None: not set); one that does not render
    hides the diffs (the safe side, as no_log)."""
    flag = options.diff
    if isinstance(flag, str):
        try:
            return to_bool(templating.render(flag, scope))
        except TemplateError:
            return False
    return None if flag is None else bool(flag)


def become_user_of(options: TaskOptions, scope: Mapping[str, Any], default: str | None = None) -> str | None:
    """Whom a task becomes: the ``ansible_become_user`` variable, else its ``become_user``
    keyword (ansible-core lets the connection variable win over the keyword), else
    ansible.cfg's ``default``, else root (None). TemplateError when it does not render."""
    user = scope.get("ansible_become_user")
    for fallback in (options.become_user, default):
        user = fallback if user is None else user
    if isinstance(user, str) and templating.is_template(user):
        user = templating.render(user, scope)
    return None if user is None else str(user)


def become_of(options: TaskOptions, scope: Mapping[str, Any]) -> bool:
    """Whether a task (or a play's fact gathering) runs as root: its ``become``, else the
    inventory's ``ansible_become``, as in Ansible. TemplateError when it does not render."""
    become = options.become
    if become is None:
        become = scope.get("ansible_become", False)
    if isinstance(become, str):
        become = to_bool(templating.render(become, scope))
    return bool(become)


class TaskRunner:
    """Runs one Task on one host. Stateless between calls except for its inputs."""

    def __init__(
        self,
        task: Task,
        host_name: str,
        conn: Connection,
        scope: templating.Scope,
        options: ExecOptions,
        progress: Callable[[str], None],
    ):
        self.task = task
        self.host = host_name
        self.conn = conn
        self.scope = scope
        self.options = options
        self.progress = progress
        self.no_log = no_log_of(task.options, scope)
        self.diff = diff_of(task.options, scope)
        self.check_mode = checkmode.task_check_mode(task.options)
        if self.check_mode and not options.check_mode:  # `check_mode: true` in a real run
            self.options = replace(options, check_mode=True, before_apply=None)
            self.conn = PredictedHost(conn)
        # what the task did that may change the host, for the recap of an interrupted run
        self.touched: list[str] = []
        self.left_running: list[str] = []

    def _pause(self, seconds: float) -> None:
        """Sleep between attempts; a run that is stopping does not wait it out (in a fork
        the signal never arrives as an exception: the stop flag says it)."""
        pause_unless_stopped(self.options.stop, seconds)

    def run(self) -> Outcome:
        # while planning on a local connection, controller-side reads see the earlier changes
        view = self.conn if isinstance(self.conn, PredictedHost) else None
        with controller_files.seeing(view):
            outcome = self._run()
        if self.no_log:
            _mask_no_log(self.task.register or "no_log", outcome)
        return outcome

    def _run(self) -> Outcome:
        task = self.task
        if task.loop is None:
            result, set_vars = self._one(self.scope, None)
            return Outcome((result,), result.status, _registered(result), set_vars)
        try:
            items = loop_items(task, self.scope)
        except TemplateError as exc:
            return self._whole_failure(f"loop: {exc}")
        if not items:  # Ansible: skipped, "No items in the list"
            skipped = self._event(_Attempt(status=Status.SKIPPED, changed=False, msg=NO_ITEMS), None, 0.0)
            return Outcome((skipped,), Status.SKIPPED, {**_loop_registered([]), "skipped_reason": NO_ITEMS})
        results, set_vars = [], {}
        for index, item in enumerate(items):
            loop_vars = {task.loop_var: item, **({task.index_var: index} if task.index_var else {})}
            # each item sees what set_fact did in the items before it
            item_scope = self.scope.child({**set_vars, **loop_vars})
            result, item_vars = self._one(item_scope, self._label(item_scope, item))
            results.append(result)
            set_vars.update(item_vars)
        return Outcome(tuple(results), _loop_status(results), _loop_registered(results, items), set_vars)

    def _label(self, scope: templating.Scope, item: Any) -> Any:
        """What output shows for an item: ``loop_control.label`` rendered (often written to
        keep a secret in the item off the screen), else the item. Registered results keep
        the item itself, as in Ansible."""
        if self.task.loop_label is None:
            return item
        try:
            return templating.render(self.task.loop_label, scope)
        except TemplateError:
            return "(loop_control.label did not render)"

    def _whole_failure(self, msg: str) -> Outcome:
        result = self._event(_failed(msg), None, 0.0)
        return Outcome((result,), Status.FAILED, _registered(result))

    def _event(self, attempt: _Attempt, item: Any, duration_s: float, ignored: bool = False) -> HostResult:
        if self.check_mode:  # planned in every run, applied in none: never a saved plan's change
            attempt = replace(attempt, planned="", summary="", fingerprint={}, impact=(), depends_on="")
        return HostResult(
            host=self.host,
            task=self.task.display_name,
            status=attempt.status,
            changed=attempt.changed,
            msg=attempt.msg,
            diffs=attempt.diffs,
            data=attempt.data,
            warnings=attempt.warnings,
            duration_s=round(duration_s, 4),
            item=item,
            ignored=ignored,
            no_log=self.no_log,
            location=str(self.task.location),
            planned=attempt.planned,
            summary=attempt.summary,
            fingerprint=attempt.fingerprint,
            depends_on=attempt.depends_on,
            impact=attempt.impact,
            change_kind=attempt.change_kind,
            diff=self.diff,
        )

    def _one(self, scope: templating.Scope, item: Any) -> tuple[HostResult, Mapping[str, Any]]:
        started = time.monotonic()
        attempt = self._conditioned(scope)
        ignored = attempt.status == Status.FAILED and self._ignore_errors(scope)
        return self._event(attempt, item, time.monotonic() - started, ignored), attempt.set_vars

    def _ignore_errors(self, scope: templating.Scope) -> bool:
        flag = self.task.options.ignore_errors
        if isinstance(flag, str):
            try:
                return to_bool(templating.render(flag, scope))
            except TemplateError:
                return False
        return bool(flag)

    def _conditioned(self, scope: templating.Scope) -> _Attempt:
        try:
            if not templating.all_true(self.task.options.when, scope):
                return _Attempt(status=Status.SKIPPED, changed=False, msg="condition was false")
        except TemplateError as exc:
            return _failed(f"task '{self.task.display_name}' ({self.task.location}): when: {exc}")
        try:
            retries = task_numbers.rendered_count(self.task.retries, "retries", scope) if self.task.until else 0
            delay_s = task_numbers.rendered_seconds(self.task.delay_s, "delay", scope) if self.task.until else 0.0
        except (TemplateError, ValueError) as exc:
            return _failed(f"task '{self.task.display_name}' ({self.task.location}): {exc}")
        attempts = retries + 1 if self.task.until else 1
        attempt = _failed("no attempt made")
        for number in range(1, attempts + 1):
            attempt = self._judged(self._attempt(scope), scope)
            if self.task.until:
                attempt = replace(attempt, data={**attempt.data, "attempts": number})
            if not self.task.until or attempt.status in (Status.UNREACHABLE, Status.SKIPPED):
                return attempt
            if self._holds(self.task.until, attempt, scope):
                return attempt
            if number < attempts:
                self.progress(f"retrying ({number}/{retries}): until not met")
                self._pause(delay_s)
        return replace(
            attempt,
            status=Status.FAILED,
            msg=f"until not met after {attempts} attempts: {attempt.msg}".rstrip(": "),
        )

    def _holds(self, conditions: tuple[Any, ...], attempt: _Attempt, scope: templating.Scope) -> bool:
        registered = {
            **_command_output(attempt.data),
            "changed": attempt.changed,
            "failed": attempt.status == Status.FAILED,
            "msg": attempt.msg,
            "skipped": attempt.status == Status.SKIPPED,
        }
        view = scope.child({self.task.register: registered} if self.task.register else {})
        return templating.all_true(conditions, view.child(registered))

    def _judged(self, attempt: _Attempt, scope: templating.Scope) -> _Attempt:
        """Apply changed_when / failed_when to a finished attempt."""
        if attempt.status in (Status.UNREACHABLE, Status.SKIPPED):
            return attempt
        try:
            changed = attempt.changed
            if self.task.changed_when:
                changed = self._holds(self.task.changed_when, attempt, scope)
            status = Status.CHANGED if changed else Status.OK
            if attempt.status == Status.FAILED and not self.task.failed_when:
                return attempt
            if self.task.failed_when:
                failing = self._holds(self.task.failed_when, attempt, scope)
                attempt = replace(attempt, data={**attempt.data, "failed_when_result": failing})  # as Ansible registers
                if failing:
                    return replace(
                        attempt,
                        status=Status.FAILED,
                        changed=changed,
                        msg=attempt.msg or "failed_when condition was true",
                    )
                if attempt.status == Status.FAILED:
                    status = Status.CHANGED if changed else Status.OK
            return replace(attempt, status=status, changed=changed)
        except TemplateError as exc:
            return _failed(f"task '{self.task.display_name}': {exc}")

    def _attempt(self, scope: templating.Scope) -> _Attempt:
        task = self.task
        try:
            spec = registry.get(task.module)
            args = _rendered_args(task, scope)
            environment = merged_environment(task.options.environment, scope)
            become_user = become_user_of(task.options, scope, self.options.become_user)
            become = become_target(become_of(task.options, scope), become_user)
            timeout_s = (
                None
                if task.timeout_s is None
                else task_numbers.rendered_seconds(task.timeout_s, "timeout", scope, zero_ok=False)
            )
            method = scope.get("ansible_become_method")
            if become and method not in (None, "sudo"):  # the keyword is refused by validate
                raise ValueError(f"ansible_become_method {method!r} is not supported (rigger becomes users with sudo)")
        except TemplateError as exc:
            return _failed(f"task '{task.display_name}' ({task.location}): {exc}")
        except ValueError as exc:  # a become_user that is no user name, a become method rigger lacks
            return _failed(f"task '{task.display_name}' ({task.location}): {exc}")
        if isinstance(args, Mapping):
            args = spec.coerced(args)
        problem = _args_problem(spec, args)
        if problem:
            return _failed(f"task '{task.display_name}' ({task.location}): {problem}")
        args = spec.with_defaults(args)
        if self.check_mode is False and self.options.check_mode:
            return _Attempt(status=Status.SKIPPED, changed=False, msg=checkmode.NOT_RUN_WHILE_CHECKING,
                            data=checkmode.skipped_data(spec.name, None))  # fmt: skip
        skip = _quarantine_skip(spec, args, scope)
        if skip:
            return _Attempt(status=Status.SKIPPED, changed=False, msg=skip)
        conn = ScopedConnection(
            self.conn,
            TaskScope(
                become=become,
                environment={k: str(v) for k, v in environment.items()},
                timeout_s=timeout_s,
                stop=self.options.stop,
            ),
            touched=self.touched,
            left_running=self.left_running,
        )
        ctx = TaskContext(
            host_name=self.host,
            conn=conn.planning(),
            facts=scope.get("facts", {}),
            vars=scope,
            task_name=task.display_name,
            timeout_s=timeout_s,
            progress=self.progress,
            connect=self.options.connect,
        )
        try:
            args = _expanded_paths(spec, ctx, args)
            return self._plan_apply(spec, ctx, conn, args)
        except HostUnreachable as exc:
            return _Attempt(status=Status.UNREACHABLE, changed=False, msg=str(exc))
        except TaskFailed as exc:
            return self._unplannable(exc.msg) or _failed(exc.msg, exc.data)
        except (ProbeError, OSError) as exc:  # failed on the host (permission, missing tool): not a bug
            return self._unplannable(str(exc)) or _failed(f"{task.module} on {self.host}: {exc}")
        except Exception as exc:  # a bug in a module: one line, traceback with -v
            detail = traceback.format_exc() if self.options.verbosity else ""
            return _failed(
                f"unexpected error in module {task.module} (a bug): {type(exc).__name__}: {exc}\n{detail}".rstrip()
            )

    def _unplannable(self, error: str) -> _Attempt | None:
        """While planning: a plan that failed on what an earlier task produces only when
        applied (the file a command creates) is known after apply, not a failure."""
        if not self.options.check_mode or not isinstance(self.conn, PredictedHost):
            return None
        unknown = self.conn.unknown_reads()
        if not unknown:
            return None
        msg = f"{unknown[0].describe()} (planning it now: {error})"
        return _Attempt(
            status=Status.SKIPPED, changed=False, msg=msg, planned="after-apply", depends_on=unknown[0].task
        )

    def _plan_apply(
        self, spec: registry.ModuleSpec, ctx: TaskContext, conn: ScopedConnection, args: dict[str, Any]
    ) -> _Attempt:
        predicted = self.conn if isinstance(self.conn, PredictedHost) else None
        if predicted is not None:
            predicted.begin_task()
        change = spec.plan(ctx, args)
        unknown = predicted.unknown_reads() if predicted is not None and spec.check_mode != "read-only" else []
        # A plan made from what an earlier task produces only when applied: shown, marked.
        later: dict[str, Any] = {"planned": "after-apply", "depends_on": unknown[0].task} if unknown else {}
        note = f" ({unknown[0].describe()})" if unknown else ""
        if self.options.before_apply is not None and not self.options.check_mode:
            step = PlannedStep(
                self.host, str(self.task.location), spec.name, spec.check_mode, self.no_log, change, self.diff is False
            )
            self.options.before_apply(step)
        if change is None:
            return _Attempt(status=Status.OK, changed=False, msg=note.strip(" ()"), **{"planned": "unchanged", **later})
        if isinstance(change, Unchanged):
            return _Attempt(
                status=Status.OK,
                changed=False,
                msg=change.msg + note,
                data=dict(change.data),
                warnings=tuple(change.warnings),
                set_vars=dict(change.set_vars),
                **{"planned": "unchanged", **later},
            )
        assert isinstance(change, Change), f"plan() of {spec.name} returned {type(change).__name__}"
        assert spec.apply is not None, f"plan() of the read-only module {spec.name} returned a Change"
        planned: dict[str, Any] = {
            "planned": "change",
            "summary": change.summary,
            "fingerprint": dict(change.fingerprint),
            "impact": impact_lines(change.effects),
            **later,
            "change_kind": change.kind,
        }
        if self.options.check_mode:
            # a command's effects are what the command does (it may use sudo itself): not judged
            denied = permissions.permission_failure(conn, change.effects) if spec.check_mode != "skip" else ""
            if denied:  # shown in the review, counted by `rigger plan`
                planned["impact"] = (*planned["impact"], denied)
                note += f" ({denied})"
            # a `check_mode: true` task is never applied: later tasks must not see its change
            if predicted is not None and not self.check_mode:
                predicted.record(change.effects, self.task.display_name)
            if spec.check_mode in ("skip", "measure"):
                return _Attempt(
                    status=Status.SKIPPED,
                    changed=False,
                    msg=f"check mode: would {change.summary}{note}",
                    diffs=change.diffs,
                    data=checkmode.skipped_data(spec.name, change.payload),
                    **planned,
                )
            return _Attempt(
                status=Status.CHANGED, changed=True, msg=f"would {change.summary}{note}", diffs=change.diffs, **planned
            )
        run_ctx = TaskContext(**{**ctx.__dict__, "conn": conn})
        result = spec.apply(run_ctx, args, change)
        return replace(_from_result(result), **planned)


def impact_lines(effects: tuple[Effect, ...]) -> tuple[str, ...]:
    """What a change does to running things, for the review: stops, then starts with argv."""
    lines = [f"stops {e.what}" for e in effects if isinstance(e, Stops)]
    for effect in effects:
        if isinstance(effect, Starts):
            where = f" on port {effect.port}" if effect.port else ""
            verb = "then starts" if lines else "starts"
            lines.append(f"{verb} {effect.name}{where} with argv {shlex.join(effect.argv)}")
    return tuple(lines)


def _from_result(result: Result) -> _Attempt:
    status = Status.FAILED if result.failed else Status.CHANGED if result.changed else Status.OK
    return _Attempt(
        status=status,
        changed=result.changed,
        msg=result.msg,
        diffs=tuple(result.diffs),
        data=dict(result.data),
        warnings=tuple(result.warnings),
        set_vars=dict(result.set_vars),
    )


def _quarantine_skip(spec: registry.ModuleSpec, args: Mapping[str, Any], scope: templating.Scope) -> str | None:
    """Why a serving task skips this host (quarantined on the controller), or None."""
    entry = scope.get(quarantine.HOST_VAR)
    if not entry or spec.quarantine_skips is None or not spec.quarantine_skips(args):
        return None
    try:
        included = to_bool(templating.render(scope.get(quarantine.INCLUDE_VAR, False), scope))
    except TemplateError:
        included = False
    if included:
        return None
    return (
        f"host quarantined since {entry.get('since')} ({entry.get('reason')}, by '{entry.get('task')}'): "
        f"not serving here; clear it with `rigger quarantine clear HOST`, or run with "
        f"-e {quarantine.INCLUDE_VAR}=true"
    )


def _args_problem(spec: registry.ModuleSpec, args: Any) -> str | None:
    if not isinstance(args, Mapping):
        return f"{spec.name} takes a mapping of arguments, got {type(args).__name__}"
    error = next(iter(sorted(spec.validator.iter_errors(dict(args)), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        return None
    path = ".".join(str(p) for p in error.absolute_path) or spec.name
    words = schema_words.combinator_words(error) or error.message
    return f"invalid argument {path}: {words}{registry.unknown_key_hint(error)}"


def _loop_status(results: list[HostResult]) -> Status:
    statuses = {r.status for r in results if not r.ignored}
    for status in (Status.UNREACHABLE, Status.FAILED, Status.CHANGED, Status.OK):
        if status in statuses:
            return status
    if any(r.ignored for r in results):
        return Status.FAILED
    return Status.SKIPPED


def _mask_no_log(register: str, outcome: Outcome) -> None:
    """A no_log task's set_fact values and output are secret wherever they go next (the one
    mask, engine/mask.py): a later ``debug: var=result.stdout`` shows ``<hidden: ...>``."""
    for name, value in outcome.set_vars.items():
        MASK.add(value, name)
    MASK.add(answers(dict(outcome.registered)), register)


def _loop_registered(results: list[HostResult], items: list[Any] | None = None) -> dict[str, Any]:
    shown = items if items is not None else [r.item for r in results]
    return {
        "results": [{**_registered(r), "item": item} for r, item in zip(results, shown, strict=True)],
        "changed": any(r.changed for r in results),
        "failed": any(r.status == Status.FAILED and not r.ignored for r in results),
        "skipped": all(r.status == Status.SKIPPED for r in results) if results else True,
        "msg": "; ".join(r.msg for r in results if r.status == Status.FAILED),
    }
