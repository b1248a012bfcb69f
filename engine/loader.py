"""YAML playbook -> model, with file:line in every error. Touches no host."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from engine import registry, templating
from engine.errors import TemplateError, ValidationError
from engine.playbook import Block, Location, Play, Playbook, Step, Task, TaskOptions
from engine.yamlload import LocatedDict, LocatedList, line_of, load_file

SCHEMA_DIR = Path(__file__).parent / "schemas"
BLOCK_KEYS = frozenset(
    {"name", "block", "rescue", "always", "when", "tags", "become", "environment", "no_log", "ignore_errors"}
)
CONDITION_KEYS = ("when", "changed_when", "failed_when", "until")


@cache
def playbook_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / "playbook.schema.json").read_text())
    return schema


@cache
def _keyword_validators() -> dict[str, Any]:
    schema = playbook_schema()
    defs = {"$defs": schema["$defs"]}
    return {key: jsonschema.Draft202012Validator({**sub, **defs}) for key, sub in schema["task_keywords"].items()}


def task_keywords() -> frozenset[str]:
    return frozenset(playbook_schema()["task_keywords"])


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


def _where(container: Any, key: Any = None) -> tuple[str | None, int | None]:
    file = getattr(container, "file", None) or None
    line = line_of(container, key) if key is not None else getattr(container, "line", None)
    return file, line


def fail(container: Any, key: Any, message: str) -> ValidationError:
    file, line = _where(container, key)
    return ValidationError(message, file=file, line=line)


def _yaml11_hint(container: Any, key: Any, value: Any) -> str:
    raw = getattr(container, "raw_scalars", {}).get(key)
    if raw is not None and not isinstance(value, str) and raw != str(value):
        return f" (YAML read {raw!r} as {json.dumps(value)}; quote it: '{raw}')"
    return ""


def schema_error(root: Any, error: jsonschema.ValidationError, what: str) -> ValidationError:
    """Locate a JSON Schema error at the deepest YAML node on its path."""
    holder, key, node = root, None, root
    for part in error.absolute_path:  # holder: the deepest YAML node that holds `key`
        if not (
            (isinstance(node, dict) and part in node)
            or (isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node))
        ):
            break
        holder, key, node = node, part, node[part]
        if not isinstance(node, (LocatedDict, LocatedList)):
            break
    path = ".".join(str(p) for p in error.absolute_path) or what
    hint = _yaml11_hint(holder, key, error.instance) if key is not None else ""
    return fail(holder, key, f"{path}: {_short(error)}{hint}")


def _short(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return str(error.message).replace("Additional properties are not allowed", "unknown key(s)")
    if error.validator in ("anyOf", "oneOf") and error.context:
        best = jsonschema.exceptions.best_match(error.context)
        return str(best.message if best else error.message)
    return str(error.message)


def load_playbook(path: str | Path) -> Playbook:
    data = load_file(path)
    name = str(path)
    if data is None:
        raise ValidationError("the playbook is empty", file=name)
    if not isinstance(data, list):
        raise ValidationError("a playbook is a list of plays (it starts with '- hosts: ...')", file=name, line=1)
    errors = sorted(
        jsonschema.Draft202012Validator(playbook_schema()).iter_errors(data), key=lambda e: list(e.absolute_path)
    )
    if errors:
        raise schema_error(data, errors[0], "playbook")
    base = Path(path).parent
    return Playbook(path=name, plays=tuple(_play(play, base) for play in data))


def _options(data: Mapping[str, Any], inherited: TaskOptions) -> TaskOptions:
    env = data.get("environment")
    return TaskOptions(
        when=inherited.when + _as_tuple(data.get("when")),
        tags=inherited.tags + tuple(str(t) for t in _as_tuple(data.get("tags"))),
        become=data.get("become", inherited.become),
        environment={**inherited.environment, **(env if isinstance(env, Mapping) else {})},
        no_log=data.get("no_log", inherited.no_log),
        ignore_errors=data.get("ignore_errors", inherited.ignore_errors),
    )


def _play(data: LocatedDict, base: Path) -> Play:
    hosts = data["hosts"]
    options = _options({k: v for k, v in data.items() if k != "when"}, TaskOptions())
    steps = tuple(data.get("pre_tasks", [])) + tuple(data.get("tasks", [])) + tuple(data.get("post_tasks", []))
    serial = _as_tuple(data.get("serial"))
    return Play(
        name=data.get("name") or (hosts if isinstance(hosts, str) else ",".join(hosts)),
        hosts=hosts if isinstance(hosts, str) else ":".join(hosts),
        location=Location(data.file, data.line),
        tasks=tuple(_step(step, options, data, i) for i, step in enumerate(steps)),
        handlers=tuple(_task(h, TaskOptions(no_log=options.no_log)) for h in data.get("handlers", [])),
        vars=dict(data.get("vars") or {}),
        vars_files=tuple(str(base / f) if not Path(f).is_absolute() else f for f in _as_tuple(data.get("vars_files"))),
        gather_facts=data.get("gather_facts", True),
        serial=serial,
        max_fail_percentage=data.get("max_fail_percentage"),
        any_errors_fatal=data.get("any_errors_fatal", False),
        options=options,
    )


def _step(data: Any, inherited: TaskOptions, parent: Any, index: int) -> Step:
    if not isinstance(data, Mapping):
        raise fail(parent, index, "a task must be a mapping")
    if "block" in data:
        return _block(data, inherited)
    return _task(data, inherited)


def _block(data: Any, inherited: TaskOptions) -> Block:
    unknown = sorted(set(data) - BLOCK_KEYS)
    if unknown:
        raise fail(
            data,
            unknown[0],
            f"'{unknown[0]}' is not allowed on a block{registry.suggest(unknown[0], sorted(BLOCK_KEYS))}",
        )
    _check_keywords(data, [k for k in data if k in task_keywords()])
    options = _options(data, inherited)

    def steps(key: str) -> tuple[Step, ...]:
        items = data.get(key) or []
        return tuple(_step(item, options, items, i) for i, item in enumerate(items))

    return Block(
        name=data.get("name", ""),
        block=steps("block"),
        rescue=steps("rescue"),
        always=steps("always"),
        location=Location(data.file, data.line),
        options=options,
    )


def _check_keywords(data: Any, keys: list[str]) -> None:
    validators = _keyword_validators()
    for key in keys:
        error = jsonschema.exceptions.best_match(validators[key].iter_errors(data[key]))
        if error is not None:
            hint = _yaml11_hint(data, key, data[key])
            raise fail(data, key, f"'{key}': {_short(error)}{hint}")
    for key in CONDITION_KEYS:
        for condition in _as_tuple(data.get(key)):
            try:
                templating.check_condition_syntax(condition)
            except TemplateError as exc:
                raise fail(data, key, f"'{key}': {exc}") from None


def _module_key(data: Any) -> str:
    keywords = task_keywords()
    others = [key for key in data if key not in keywords]
    if not others:
        raise fail(data, None, "this task names no module")
    known = registry.module_names()
    unknown = [key for key in others if key not in known]
    if unknown:
        key = unknown[0]
        hint = registry.suggest(key, [*known, *sorted(keywords)])
        raise fail(data, key, f"unknown module or task keyword '{key}'{hint}")
    if len(others) > 1:
        raise fail(data, others[1], f"a task runs one module; this one names {', '.join(others)}")
    return str(others[0])


def _task(data: Any, inherited: TaskOptions) -> Task:
    if not isinstance(data, Mapping):
        raise ValidationError("a task must be a mapping")
    if any(key in data for key in ("block", "rescue", "always")):
        raise fail(data, None, "'rescue' and 'always' belong to a block")
    module = _module_key(data)
    _check_keywords(data, [k for k in data if k in task_keywords()])
    args = _module_args(data, module)
    loop_control = data.get("loop_control") or {}
    return Task(
        name=data.get("name", ""),
        module=module,
        args=args,
        location=Location(getattr(data, "file", ""), line_of(data, module) or 0),
        options=_options(data, inherited),
        loop=data.get("loop", data.get("with_items")),
        loop_var=loop_control.get("loop_var", "item"),
        register=data.get("register"),
        changed_when=_as_tuple(data.get("changed_when")),
        failed_when=_as_tuple(data.get("failed_when")),
        until=_as_tuple(data.get("until")),
        retries=data.get("retries", 3),
        delay_s=float(data.get("delay", 5)),
        notify=tuple(_as_tuple(data.get("notify"))),
        listen=tuple(_as_tuple(data.get("listen"))),
        timeout_s=data.get("timeout"),
    )


def _module_args(data: Any, module: str) -> Any:
    spec = registry.get(module)
    args = data[module]
    if args is None:
        args = {}
    if isinstance(args, str):
        if spec.free_form is None:
            raise fail(data, module, f"'{module}' takes a mapping of arguments, not a string")
        args = {spec.free_form: args}
    if not isinstance(args, Mapping):
        raise fail(data, module, f"'{module}' takes a mapping of arguments")
    try:
        templating.check_syntax(args)
    except TemplateError as exc:
        raise fail(data, module, str(exc)) from None
    _validate_static_args(spec, args, data, module)
    return args


def _validate_static_args(spec: registry.ModuleSpec, args: Mapping[str, Any], data: Any, module: str) -> None:
    """Check what is not templated; templated values are checked when rendered."""
    for error in spec.validator.iter_errors(dict(args)):
        if templating.contains_template(error.instance) or _under_template(args, error.absolute_path):
            continue
        holder = args if isinstance(args, LocatedDict) else data
        raise (
            schema_error(holder, error, module) if holder is args else fail(data, module, f"{module}: {_short(error)}")
        )


def _under_template(args: Any, path: Any) -> bool:
    node = args
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
        if templating.is_template(node):
            return True
    return False
