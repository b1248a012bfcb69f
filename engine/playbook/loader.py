"""YAML playbook -> model, with file:line in every error. Touches no host."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from engine import registry, schema_words, templating
from engine.argvalues import SchemaValidator
from engine.errors import TemplateError, ValidationError
from engine.model import Block, Location, Play, Playbook, Step, Task, TaskOptions, unknown_connection, walk
from engine.playbook import ansible_modules, includes, kvargs, loops, module_defaults, unsupported
from engine.yamlload import LocatedDict, LocatedList, line_of, load_file

SCHEMA_DIR = Path(__file__).parent / "schemas"
BLOCK_KEYS = frozenset(
    {
        "name",
        "block",
        "rescue",
        "always",
        "when",
        "tags",
        "become",
        "environment",
        "no_log",
        "ignore_errors",
        "vars",
        "run_once",
        "delegate_to",
        "delegate_facts",
        "become_user",
        "become_method",
        "check_mode",
        "diff",
        "ignore_unreachable",  # false only (unsupported.py): Ansible's default
        "notify",
        "connection",
        "throttle",
        "module_defaults",
    }
)
# Actions the loader and runner handle themselves (no module file).
STRUCTURE_ACTIONS = frozenset({"meta", "include_tasks", "import_tasks", "include_role", "import_role"})
CONDITION_KEYS = ("when", "changed_when", "failed_when", "until")


@cache
def playbook_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / "playbook.schema.json").read_text())
    return schema


@cache
def _keyword_validators() -> dict[str, Any]:
    schema = playbook_schema()
    defs = {"$defs": schema["$defs"]}
    return {key: SchemaValidator({**sub, **defs}) for key, sub in schema["task_keywords"].items()}


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
    if error.validator == "additionalProperties":
        holder, key = _unknown_key_at(root, error, holder, key)
    return fail(holder, key, f"{path}: {_short(error)}{hint}")


def _unknown_key_at(root: Any, error: jsonschema.ValidationError, container: Any, key: Any) -> tuple[Any, Any]:
    """The mapping holding an unknown key, and that key: the line to point at."""
    node = root
    for part in error.absolute_path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return container, key
    if not isinstance(node, LocatedDict):
        return container, key
    known = error.schema.get("properties") or {}
    return node, next((k for k in node if k not in known), key)


def _short(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        short = str(error.message).replace("Additional properties are not allowed", "unknown key(s)")
        return short + registry.unknown_key_hint(error)
    words = schema_words.combinator_words(error)
    if words is not None:
        return words
    if error.validator in ("anyOf", "oneOf") and error.context:
        best = jsonschema.exceptions.best_match(error.context)
        return str(best.message if best else error.message)
    return str(error.message)


def load_playbook(path: str | Path, extra_vars: Mapping[str, Any] | None = None) -> Playbook:
    plays = _playbook_plays(Path(path), dict(extra_vars or {}), ())
    return Playbook(path=str(path), plays=tuple(plays))


def load_include(task: Task, args: Mapping[str, Any]) -> tuple[Step, ...]:
    """What a dynamic include loads when it runs with these (rendered) arguments."""
    assert task.include is not None
    return includes.load_at_run_time(task.include, args, task, _steps, _options)


def _playbook_plays(path: Path, extra: dict[str, Any], stack: tuple[str, ...]) -> list[Play]:
    data = load_file(path)
    name = str(path)
    if data is None:
        raise ValidationError("the playbook is empty", file=name)
    if not isinstance(data, list):
        raise ValidationError("a playbook is a list of plays (it starts with '- hosts: ...')", file=name, line=1)
    if not data:
        raise ValidationError("the playbook has no plays", file=name, line=1)
    plays: list[Play] = []
    for index, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise fail(data, index, "a play must be a mapping")
        if "import_playbook" in item or "ansible.builtin.import_playbook" in item:
            plays += includes.import_playbook(item, path, extra, (*stack, name), _playbook_plays)
        else:
            plays.append(_play(item, path.parent, extra))  # type: ignore[arg-type]
    return plays


@cache
def _play_validator() -> Any:
    schema = playbook_schema()
    return SchemaValidator({**schema["$defs"]["play"], "$defs": schema["$defs"]})


def _play_vars(data: LocatedDict) -> dict[str, Any]:
    """``vars:`` as a mapping; a list of mappings is refused, as ansible-core 2.19 refuses it."""
    value = data.get("vars") or {}
    if not isinstance(value, Mapping):
        raise fail(data, "vars", "a play's vars must be a mapping (Ansible refuses a list too: merge its items)")
    return dict(value)


def _play(data: LocatedDict, base: Path, extra: Mapping[str, Any]) -> Play:
    unsupported.check(data, "play")
    play_vars = _play_vars(data)
    keys = {k: v for k, v in data.items() if k not in unsupported.IGNORED_PLAY_KEYS}
    known = playbook_schema()["$defs"]["play"]["properties"]
    for key in keys:
        reason = None if key in known else unsupported.lacking(key, "play")
        if reason:
            raise fail(data, key, reason)
    errors = sorted(_play_validator().iter_errors(keys), key=lambda e: list(e.absolute_path))
    if errors:
        raise schema_error(data, errors[0], "play")
    hosts = data["hosts"]
    # a play's connection/remote_user are connection variables (below the host's own)
    options = _options({k: v for k, v in data.items() if k not in ("when", "vars", "connection")}, TaskOptions())
    ctx = includes.Loading(
        _steps,
        _options,
        playbook_dir=base,
        base=base,
        extra_vars=extra,
        play_vars=play_vars,
        files=(data.file,),
        collections=_play_collections(data),
    )
    pre = _steps(data.get("pre_tasks") or [], options, ctx)
    roles_ = data.get("roles") or []
    role_steps = tuple(includes.play_role(roles_, i, options, ctx) for i in range(len(roles_)))
    tasks = _steps(data.get("tasks") or [], options, ctx)
    post = _steps(data.get("post_tasks") or [], options, ctx)
    flush = (_implicit_flush(data),)
    steps = pre + (flush if pre else ()) + role_steps + tasks + (flush if post else ()) + post
    _refuse_listen_outside_handlers(steps)
    handlers = tuple(_handler(h, options, ctx) for h in data.get("handlers") or [])
    serial = _as_tuple(data.get("serial"))
    return Play(
        name=data.get("name") or (hosts if isinstance(hosts, str) else ",".join(hosts)),
        hosts=hosts if isinstance(hosts, str) else ":".join(hosts),
        location=Location(data.file, data.line),
        tasks=steps,
        handlers=tuple(ctx.handlers) + handlers,
        vars=play_vars,
        vars_files=tuple(str(base / f) if not Path(f).is_absolute() else f for f in _as_tuple(data.get("vars_files"))),
        gather_facts=data.get("gather_facts", True),
        gather_subset=_as_tuple(data.get("gather_subset")) or ("all",),
        serial=serial,
        max_fail_percentage=data.get("max_fail_percentage"),
        any_errors_fatal=data.get("any_errors_fatal", False),
        options=options,
        role_defaults=dict(ctx.role_defaults),
        role_vars=dict(ctx.role_vars),
        connection_vars=_connection_vars(data),
    )


def _refuse_listen_outside_handlers(steps: tuple[Step, ...]) -> None:
    """``listen`` is a handler's keyword; ansible-core 2.19 refuses it on a task ("'listen'
    is not a valid attribute for a Task"), where it would silently mean nothing."""
    for task, _ in walk(steps):
        if task.listen:
            raise ValidationError(
                "'listen' is a handler's keyword, not a task's (move the task under handlers:, or remove it)",
                file=task.location.file or None,
                line=task.location.line,
            )


def _play_collections(data: LocatedDict) -> tuple[str, ...]:
    """``collections: [ns.coll, ...]``: where short role names are searched first."""
    value = data.get("collections") or []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n.count(".") == 1 for n in names):
        raise fail(data, "collections", "collections: a list of collection names (namespace.name)")
    return tuple(names)


def _check_connection(data: Any) -> None:
    """A play's, block's or task's ``connection:`` must be a transport rigger has."""
    problem = unknown_connection(data.get("connection"))
    if problem:
        raise ValidationError(problem.replace("ansible_connection", "connection", 1), file=data.file,
                              line=line_of(data, "connection"))  # fmt: skip


def _connection_vars(data: LocatedDict) -> dict[str, Any]:
    """Play keywords that choose the connection; a host's own variables still win."""
    _check_connection(data)
    user = data.get("remote_user", data.get("user"))  # `user:` is remote_user's old name
    wanted = {"ansible_connection": data.get("connection"), "ansible_user": user}
    return {k: v for k, v in wanted.items() if v is not None}


def _implicit_flush(data: LocatedDict) -> Task:
    """Ansible runs notified handlers after pre_tasks and after roles+tasks."""
    return Task(name="", module="meta", args={"_raw_params": "flush_handlers"}, location=Location(data.file, data.line))


def _handler(data: Any, options: TaskOptions, ctx: includes.Loading) -> Task:
    inherited = TaskOptions(
        no_log=options.no_log, diff=options.diff, check_mode=options.check_mode, module_defaults=options.module_defaults
    )
    step = _step(data, inherited, ctx, None, 0)
    if not isinstance(step, Task):
        raise fail(data, None, "a handler is a task, not a block or an import")
    return step


def _vars_of(data: Mapping[str, Any]) -> dict[str, Any]:
    value = data.get("vars")
    return dict(value) if isinstance(value, Mapping) else {}


def _options(data: Mapping[str, Any], inherited: TaskOptions) -> TaskOptions:
    env = data.get("environment")
    return replace(
        inherited,
        when=inherited.when + _as_tuple(data.get("when")),
        tags=inherited.tags + _as_tuple(data.get("tags")),
        become=data.get("become", inherited.become),
        become_user=data.get("become_user", inherited.become_user),
        environment=inherited.environment + ((env,) if env else ()),
        module_defaults=inherited.module_defaults + _defaults_layer(data),
        no_log=data.get("no_log", inherited.no_log),
        diff=data.get("diff", inherited.diff),
        check_mode=data.get("check_mode", inherited.check_mode),
        ignore_errors=data.get("ignore_errors", inherited.ignore_errors),
        vars={**inherited.vars, **_vars_of(data)},
        run_once=data.get("run_once", inherited.run_once),
        delegate_to=data.get("delegate_to", inherited.delegate_to),
        delegate_facts=data.get("delegate_facts", inherited.delegate_facts),
        notify=tuple(_as_tuple(data["notify"])) if "notify" in data else inherited.notify,
        connection=data.get("connection", inherited.connection),
    )


def _defaults_layer(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    if data.get("module_defaults") is None:
        return ()
    layer = module_defaults.layer(data["module_defaults"])
    if isinstance(layer, str):
        raise fail(data, "module_defaults", layer)
    return layer


def _steps(items: Any, inherited: TaskOptions, ctx: includes.Loading) -> tuple[Step, ...]:
    if not isinstance(items, list):
        raise ValidationError("a task list must be a list", file=getattr(items, "file", None))
    return tuple(_step(item, inherited, ctx, items, i) for i, item in enumerate(items))


def _step(data: Any, inherited: TaskOptions, ctx: includes.Loading, parent: Any, index: int) -> Step:
    if not isinstance(data, Mapping):
        raise fail(parent, index, "a task must be a mapping")
    unsupported.check(data, "task")
    _check_connection(data)
    if "block" in data:
        return _block(data, inherited, ctx)
    action, args, key = _action(data, ctx.collections)
    if action in ("import_tasks", "import_role"):
        if loops.source(data)[0]:
            raise fail(data, key, f"you cannot use loops on '{action}' (use '{action.replace('import', 'include')}')")
        _check_keywords(data, [k for k in data if k in task_keywords()])
        options = _options(data, inherited)
        if action == "import_tasks":
            return includes.import_tasks(data, key, args, options, ctx)
        return includes.import_role(data, key, args, options, ctx)
    return _task(data, inherited, ctx, action, args, key)


def _block(data: Any, inherited: TaskOptions, ctx: includes.Loading) -> Block:
    unknown = sorted(set(data) - BLOCK_KEYS)
    reason = unsupported.lacking(unknown[0], "block") if unknown else None
    if reason:
        raise fail(data, unknown[0], reason)
    if unknown:
        raise fail(
            data,
            unknown[0],
            f"'{unknown[0]}' is not allowed on a block{registry.suggest(unknown[0], sorted(BLOCK_KEYS))}",
        )
    _check_keywords(data, [k for k in data if k in task_keywords()])
    options = _options(data, inherited)

    def steps(key: str) -> tuple[Step, ...]:
        return _steps(data.get(key) or [], options, ctx)

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


def _action(data: Any, collections: tuple[str, ...] = ()) -> tuple[str, Any, str]:
    """(canonical action name, its raw arguments, the YAML key that named it)."""
    keywords = task_keywords()
    others = [key for key in data if key not in keywords]
    for keyword in ("action", "local_action"):
        if keyword in data:
            if others:
                raise fail(data, others[0], f"a task runs one module; this one names {keyword} and {others[0]}")
            return (*_action_value(data, data[keyword], keyword), keyword)
    if not others:
        raise fail(data, None, "this task names no module")
    names = [registry.canonical(str(key)) for key in others]
    known = set(registry.module_names()) | STRUCTURE_ACTIONS
    unknown = [key for key, name in zip(others, names, strict=True) if name not in known]
    if unknown:
        reason = unsupported.lacking(unknown[0], "task")
        raise fail(data, unknown[0], reason or _unknown_action(str(unknown[0]), keywords, collections))
    if len(others) > 1:
        raise fail(data, others[1], f"a task runs one module; this one names {', '.join(map(str, others))}")
    args = data[others[0]]
    if isinstance(data.get("args"), Mapping):
        args = _with_args_keyword(args, data["args"])
    return names[0], args, str(others[0])


def _action_value(data: Any, value: Any, keyword: str) -> tuple[str, Any]:
    """``action: debug msg=hi`` or ``action: {module: debug, msg: hi}``."""
    if isinstance(value, Mapping):
        rest = {k: v for k, v in value.items() if k != "module"}
        name = str(value.get("module", ""))
    else:
        if templating.is_template(str(value).split(" ")[0]):
            raise fail(data, keyword, f"a module name chosen by a template (`{keyword}: {{{{...}}}}`) is not supported")
        name, _, rest_text = str(value).strip().partition(" ")
        rest = rest_text  # type: ignore[assignment]
    canonical = registry.canonical(name)
    if canonical not in set(registry.module_names()) | STRUCTURE_ACTIONS:
        raise fail(data, keyword, _unknown_action(name, task_keywords()))
    if isinstance(data.get("args"), Mapping):
        rest = _with_args_keyword(rest, data["args"])
    return canonical, rest


def _number_or_template(value: Any) -> float | str:
    """A number keyword as written: a template stays one until the task runs (as in Ansible)."""
    return value if isinstance(value, str) else float(value)


def _with_args_keyword(args: Any, extra: Mapping[str, Any]) -> Any:
    if args is None or args == "":
        return dict(extra)
    if isinstance(args, Mapping):
        return {**extra, **args}
    return {"_inline": args, **extra}


def _unknown_action(key: str, keywords: frozenset[str], collections: tuple[str, ...] = ()) -> str:
    if "." in key:
        collection = key.rsplit(".", 1)[0]
        return f"module '{key}' (from {collection}) is not available in rigger"
    lacked = ansible_modules.lacked_module(key)
    if lacked:  # Ansible's own: never "did you mean" another module
        return lacked
    if collections:  # a short name the play's collections: would resolve in Ansible
        return (
            f"module '{key}' is not available in rigger (rigger runs its own modules only, not those of "
            f"the play's collections: {', '.join(collections)})"
        )
    known = [*registry.module_names(), *sorted(keywords)]
    hint = registry.suggest(key, known)
    if hint:
        return f"unknown module or task keyword '{key}'{hint}"
    return f"unknown module or task keyword '{key}' (rigger has no module '{key}'; `rigger modules` lists them)"


def _task(data: Any, inherited: TaskOptions, ctx: includes.Loading, module: str, raw_args: Any, key: str) -> Task:
    if any(k in data for k in ("rescue", "always")):
        raise fail(data, None, "'rescue' and 'always' belong to a block")
    _check_keywords(data, [k for k in data if k in task_keywords()])
    loop_control = data.get("loop_control") or {}
    options = _options(data, inherited)
    if key == "local_action":
        options = replace(options, delegate_to="localhost")
    location = Location(getattr(data, "file", ""), line_of(data, key) or int(getattr(data, "line", 0)))
    include = None
    if module in ("include_tasks", "include_role"):
        args, include = includes.dynamic(data, key, module, raw_args, inherited, ctx)
    elif module == "meta":
        args = _meta_args(data, key, raw_args)
    else:
        args = _module_args(data, key, module, raw_args, options.module_defaults)
    return Task(
        name=data.get("name", ""),
        module=module,
        args=args,
        location=location,
        options=options,
        loop=loops.source(data)[1],
        loop_kind=loops.source(data)[0] or "loop",
        loop_var=loop_control.get("loop_var", "item"),
        index_var=loop_control.get("index_var"),
        loop_label=loop_control.get("label"),
        register=data.get("register"),
        changed_when=_as_tuple(data.get("changed_when")),
        failed_when=_as_tuple(data.get("failed_when")),
        until=_as_tuple(data.get("until")),
        retries=data.get("retries", 3),
        delay_s=_number_or_template(data.get("delay", 5)),
        notify=options.notify,
        listen=tuple(_as_tuple(data.get("listen"))),
        timeout_s=_time_limit(data.get("timeout"), unsupported.async_limit(data, module, _ansible_module(module))),
        include=include,
    )


def _ansible_module(module: str) -> bool:
    return module in ansible_modules.CORE_MODULES or module in registry.COLLECTION_MODULES.values()


def _time_limit(timeout: Any, async_seconds: int | None) -> Any:
    """``timeout`` and ``async``: the task stops at the first limit it reaches."""
    if async_seconds is None:
        return timeout
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return min(timeout, async_seconds)
    return async_seconds if timeout is None else timeout


META_ACTIONS = frozenset({"flush_handlers", "end_play", "end_host", "noop", "clear_facts", "end_batch"})
SUPPORTED_META = frozenset(
    {
        "flush_handlers",
        "end_play",
        "end_host",
        "noop",
        "clear_host_errors",
        "reset_connection",
        "refresh_inventory",
        "clear_facts",
        "end_batch",
    }
)


def _meta_args(data: Any, key: str, raw: Any) -> dict[str, Any]:
    action = raw.get("_raw_params") if isinstance(raw, Mapping) else raw
    action = str(action).strip() if action is not None else ""
    if action not in SUPPORTED_META:
        if action in META_ACTIONS:
            raise fail(data, key, f"`meta: {action}` is not supported")
        raise fail(data, key, f"unknown meta action '{action}'{registry.suggest(action, sorted(SUPPORTED_META))}")
    return {"_raw_params": action}


def free_args(module: str, raw: Any, spec: registry.ModuleSpec) -> Any:
    """A string of arguments as a mapping: ``key=value`` pairs, or the free-form text."""
    inline = raw.pop("_inline") if isinstance(raw, dict) and "_inline" in raw else None
    if inline is None and not isinstance(raw, str):
        return raw
    text = str(inline if inline is not None else raw)
    extra = dict(raw) if isinstance(raw, dict) else {}
    if spec.free_form is not None:
        keys = frozenset(spec.schema.get("properties", {})) - {spec.free_form}
        pairs, free = kvargs.parse(text, keys)
        return {**({spec.free_form: free} if free else {}), **pairs, **extra}
    pairs, free = kvargs.parse(text)
    if free:
        return None
    return {**pairs, **extra}


def _module_args(data: Any, key: str, module: str, raw: Any, defaults: tuple[Mapping[str, Any], ...] = ()) -> Any:
    spec = registry.get(module)
    args = {} if raw is None else raw
    if isinstance(args, str) or (isinstance(args, dict) and "_inline" in args):
        converted = free_args(module, dict(args) if isinstance(args, dict) else args, spec)
        if converted is None:
            raise fail(data, key, f"'{module}' takes a mapping of arguments (or key=value pairs), not free text")
        args = converted
    if not isinstance(args, Mapping):
        raise fail(data, key, f"'{module}' takes a mapping of arguments")
    args = _over_defaults(args, module_defaults.for_module(module, defaults), data, key)
    try:
        templating.check_syntax(args)
    except TemplateError as exc:
        raise fail(data, key, str(exc)) from None
    _validate_static_args(spec, args, data, key, module)
    return args


def _over_defaults(args: Mapping[str, Any], defaults: Mapping[str, Any], data: Any, key: str) -> Mapping[str, Any]:
    """The task's arguments over its module_defaults, merged once here so that validation,
    the static check, plans and the run all see what the task will run with. A default's
    problems are reported at the task's module line."""
    if not defaults:
        return args
    merged = LocatedDict({**defaults, **args})
    file, line = _where(data, key)
    merged.file, merged.line = getattr(args, "file", "") or file or "", line or int(getattr(args, "line", 0))
    own_lines = getattr(args, "key_lines", {})
    merged.key_lines = {name: own_lines.get(name, merged.line) for name in merged}
    merged.raw_scalars = {**getattr(defaults, "raw_scalars", {}), **getattr(args, "raw_scalars", {})}
    return merged


def _validate_static_args(spec: registry.ModuleSpec, args: Mapping[str, Any], data: Any, key: str, module: str) -> None:
    """Check what is not templated; templated values are checked when rendered. Strings are
    read as the declared scalar type first, as the executor reads them (`create=true`)."""
    for error in spec.validator.iter_errors(spec.coerced(args)):
        if templating.contains_template(error.instance) or _under_template(args, error.absolute_path):
            continue
        holder = args if isinstance(args, LocatedDict) else data
        raise (schema_error(holder, error, module) if holder is args else fail(data, key, f"{module}: {_short(error)}"))


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
