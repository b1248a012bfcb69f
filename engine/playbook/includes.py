"""Roles, imports and includes as Ansible defines them.

Static (resolved when the playbook is loaded): ``roles:``, ``import_tasks``, ``import_role``,
``import_playbook``. Their keywords (``when``, ``tags``, ``become``...) are copied onto
every task inside, so a ``when`` on an import is evaluated for each task.
Dynamic (resolved when the task runs, per host): ``include_tasks``, ``include_role``. Their
``when`` is evaluated once, on the include; a ``loop`` includes the file once per item.
A literal target is also read at load time, so validation and the static check see inside.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import templating
from engine.errors import TemplateError, ValidationError
from engine.model import Block, Include, Location, Play, RoleContext, Step, Task, TaskOptions
from engine.playbook import collections, roles
from engine.yamlload import line_of, load_file

StepsBuilder = Callable[[Any, TaskOptions, "Loading"], tuple[Step, ...]]
OptionsBuilder = Callable[[Mapping[str, Any], TaskOptions], TaskOptions]
ROLE_PARTS = ("tasks_from", "vars_from", "defaults_from", "handlers_from")
INCLUDE_ROLE_KEYS = frozenset({"name", "role", *ROLE_PARTS, "public", "allow_duplicates", "rolespec_validate", "apply"})


@dataclass
class Loading:
    """What building steps needs beyond the YAML: where relative names start, the role the
    steps belong to (its directory finds dependencies), and what the play collects on the way
    (role handlers, public roles' variables, roles already applied)."""

    build_steps: StepsBuilder
    build_options: OptionsBuilder
    playbook_dir: Path
    base: Path
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    play_vars: Mapping[str, Any] = field(default_factory=dict)
    role_dir: Path | None = None
    files: tuple[str, ...] = ()
    handlers: list[Task] = field(default_factory=list)
    role_defaults: dict[str, Any] = field(default_factory=dict)
    role_vars: dict[str, Any] = field(default_factory=dict)
    applied_roles: set[tuple[str, str]] = field(default_factory=set)
    collections: tuple[str, ...] = ()  # the play's `collections:`, searched first for short role names

    def within(self, path: Path, role_dir: Path | None = None) -> Loading:
        """The same play's context, loading another file (shares what the play collects)."""
        child = copy.copy(self)
        child.base = path.parent
        child.files = (*self.files, str(path))
        if role_dir is not None:
            child.role_dir = role_dir
        return child


def _fail(data: Any, key: Any, message: str) -> ValidationError:
    return ValidationError(message, file=getattr(data, "file", None) or None, line=line_of(data, key))


def _vars_of(data: Mapping[str, Any]) -> dict[str, Any]:
    value = data.get("vars")
    return dict(value) if isinstance(value, Mapping) else {}


# ---- tasks files ---------------------------------------------------------------------
def _static_name(value: Any, ctx: Loading, data: Any, key: Any) -> str:
    """A static import's target: literal, or templated from play and extra vars only."""
    if not templating.is_template(value):
        return str(value)
    try:
        return str(templating.render(value, templating.Scope(ctx.play_vars, {}, ctx.extra_vars)))
    except TemplateError as exc:
        if isinstance(key, int):  # an entry of a play's roles: (rendered with play and extra vars, as Ansible)
            raise _fail(data, key, f"roles: {exc} (a role name may use the play's vars and -e only)") from None
        raise _fail(
            data, key, f"{key}: {exc} (an import is resolved when the playbook is loaded; use include_* instead)"
        ) from None


def tasks_file(name: str, ctx: Loading, data: Any, key: str) -> Path:
    """Relative to the including file, then the role's tasks/, then the playbook."""
    candidates = [ctx.base / name]
    if ctx.role_dir is not None:
        candidates.append(ctx.role_dir / "tasks" / name)
    candidates.append(ctx.playbook_dir / name)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise _fail(
        data, key, f"{key}: tasks file '{name}' not found (looked in {', '.join(str(c.parent) for c in candidates)})"
    )


def load_tasks(path: Path, options: TaskOptions, ctx: Loading, data: Any, key: str) -> tuple[Step, ...]:
    if str(path) in ctx.files:
        raise _fail(data, key, f"{key}: '{path}' imports itself (an import loop)")
    content = load_file(path)
    if content is None:
        return ()
    if not isinstance(content, list):
        raise ValidationError("a tasks file is a list of tasks", file=str(path), line=1)
    return ctx.build_steps(content, options, ctx.within(path))


def _file_arg(args: Any, data: Any, key: str) -> str:
    if isinstance(args, Mapping):
        unknown = sorted(set(args) - {"file", "_raw_params", "apply"})
        if unknown:
            raise _fail(data, key, f"{key}: unknown argument '{unknown[0]}' (it takes 'file')")
        if "apply" in args:
            raise _fail(data, key, f"`{key}` with `apply` is not supported")
        value = args.get("file", args.get("_raw_params"))
    else:
        value = args
    if not isinstance(value, str) or not value.strip():
        raise _fail(data, key, f"{key}: which file? (give a file name)")
    return value.strip()


def import_tasks(data: Any, key: str, args: Any, options: TaskOptions, ctx: Loading) -> Block:
    path = tasks_file(_static_name(_file_arg(args, data, key), ctx, data, key), ctx, data, key)
    inner = replace(options, params={**options.params, **_vars_of(data)})
    steps = load_tasks(path, inner, ctx, data, key)
    return Block(name="", block=steps, location=Location(data.file, line_of(data, key) or data.line), options=inner)


# ---- roles ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RoleParts:
    tasks_from: str = "main"
    vars_from: str = "main"
    defaults_from: str = "main"
    handlers_from: str = "main"


@dataclass(frozen=True)
class BuiltRole:
    block: Block
    defaults: Mapping[str, Any]
    vars: Mapping[str, Any]


def role_block(
    entry: roles.RoleEntry,
    inherited: TaskOptions,
    ctx: Loading,
    parts: RoleParts = RoleParts(),
    dedupe: bool = True,
) -> BuiltRole:
    """The role's dependencies then its tasks, each task knowing its role; handlers go to
    the play. ``dedupe``: a role already applied with the same parameters is not run again
    (``roles:`` and dependencies, unless the role allows duplicates)."""
    role_dir = roles.find(entry, ctx.playbook_dir, ctx.role_dir, ctx.collections)
    meta = roles.read_meta(role_dir)
    location = Location(entry.file, entry.line)
    identity = (str(role_dir), json.dumps([parts.__dict__, entry.params], sort_keys=True, default=str))
    if dedupe and not meta.allow_duplicates and identity in ctx.applied_roles:
        return BuiltRole(Block(name="", block=(), location=location), {}, {})
    ctx.applied_roles.add(identity)
    own_defaults = roles.read_mapping(role_dir, "defaults", parts.defaults_from)
    own_vars = roles.read_mapping(role_dir, "vars", parts.vars_from)
    options = ctx.build_options(entry.keywords, inherited)
    parent = inherited.role
    chain = RoleContext(
        name=collections.role_display_name(role_dir, entry.name),
        path=str(role_dir),
        defaults={**(parent.defaults if parent else {}), **own_defaults},
        vars={**(parent.vars if parent else {}), **own_vars},
        params={**(parent.params if parent else {}), **entry.params, **_vars_of(entry.keywords)},
    )
    role_ctx = ctx.within(role_dir / "meta" / "main.yml", role_dir=role_dir)
    deps = [role_block(dep, replace(options, role=chain), role_ctx) for dep in meta.dependencies]
    dep_defaults = {k: v for dep in deps for k, v in dep.defaults.items()}
    dep_vars = {k: v for dep in deps for k, v in dep.vars.items()}
    context = replace(chain, defaults={**dep_defaults, **chain.defaults}, vars={**dep_vars, **chain.vars})
    role_options = replace(options, role=context)
    steps = _role_part(role_dir, "tasks", parts.tasks_from, role_options, ctx, entry)
    handlers = _role_part(role_dir, "handlers", parts.handlers_from, replace(TaskOptions(), role=context), ctx, entry)
    ctx.handlers.extend(step for step in handlers if isinstance(step, Task))
    block = Block(name="", block=tuple(d.block for d in deps) + steps, location=location, options=role_options)
    return BuiltRole(block, {**dep_defaults, **own_defaults}, {**dep_vars, **own_vars})


def _role_part(
    role_dir: Path, part: str, stem: str, options: TaskOptions, ctx: Loading, entry: roles.RoleEntry
) -> tuple[Step, ...]:
    path = roles.part_file(role_dir, part, stem)
    if path is None:
        if stem != "main":
            raise ValidationError(f"role '{entry.name}' has no {part}/{stem}.yml", file=entry.file, line=entry.line)
        return ()
    content = load_file(path)
    if content is None:
        return ()
    if not isinstance(content, list):
        raise ValidationError(f"role {part} must be a list", file=str(path), line=1)
    return ctx.build_steps(content, options, ctx.within(path, role_dir=role_dir))


def _publish(ctx: Loading, built: BuiltRole) -> Block:
    """Roles in ``roles:`` and import_role expose their defaults and vars to the whole play."""
    ctx.role_defaults.update(built.defaults)
    ctx.role_vars.update(built.vars)
    return built.block


def play_role(items: Any, index: int, options: TaskOptions, ctx: Loading) -> Block:
    entry = roles.entry_from(items[index], getattr(items, "file", ""), line_of(items, index) or 0)
    entry = replace(entry, name=_static_name(entry.name, ctx, items, index))
    return _publish(ctx, role_block(entry, options, ctx))


def _role_args(args: Any, data: Any, key: str) -> tuple[roles.RoleEntry, RoleParts]:
    if isinstance(args, str):
        args = {"name": args}
    if not isinstance(args, Mapping):
        raise _fail(data, key, f"{key} takes 'name' (and tasks_from, vars_from, ...)")
    unknown = sorted(set(args) - INCLUDE_ROLE_KEYS)
    if unknown:
        raise _fail(data, key, f"{key}: unknown argument '{unknown[0]}'")
    if "apply" in args:
        raise _fail(data, key, f"`{key}` with `apply` is not supported")
    if args.get("public") and key.endswith("include_role"):
        raise _fail(data, key, "`include_role` with `public: true` is not supported (use import_role)")
    name = args.get("name", args.get("role"))
    if not isinstance(name, str) or not name:
        raise _fail(data, key, f"{key}: which role? (give 'name')")
    parts = RoleParts(**{part: str(args[part]) for part in ROLE_PARTS if part in args})
    entry = roles.RoleEntry(name=name, file=getattr(data, "file", ""), line=line_of(data, key) or 0)
    return entry, parts


def import_role(data: Any, key: str, args: Any, options: TaskOptions, ctx: Loading) -> Block:
    entry, parts = _role_args(args, data, key)
    entry = replace(entry, name=_static_name(entry.name, ctx, data, key))
    inner = replace(options, params={**options.params, **_vars_of(data)})
    return _publish(ctx, role_block(entry, inner, ctx, parts, dedupe=False))


# ---- dynamic includes ----------------------------------------------------------------
def dynamic(
    data: Any, key: str, module: str, raw: Any, inherited: TaskOptions, ctx: Loading
) -> tuple[dict[str, Any], Include]:
    """The include task's arguments, and what it will load. The include's own keywords
    (when, tags, loop) apply to the include; the included tasks get only its vars."""
    inner = replace(inherited, params={**inherited.params, **_vars_of(data)}, vars={**inherited.vars, **_vars_of(data)})
    if module == "include_tasks":
        target = _file_arg(raw, data, key)
        args: dict[str, Any] = {"file": target}
    else:
        entry, parts = _role_args(raw, data, key)
        target = entry.name
        args = {"name": target, **{k: v for k, v in parts.__dict__.items() if v != "main"}}
    include = Include(
        kind=module,
        playbook_dir=str(ctx.playbook_dir),
        base_dir=str(ctx.base),
        role_dir=str(ctx.role_dir or ""),
        target=target,
        options=inner,
    )
    if templating.is_template(target):
        return args, include
    return args, replace(include, preloaded=_load_include(include, args, ctx, data, key))


def _load_include(
    include: Include, args: Mapping[str, Any], ctx: Loading, data: Any, key: str
) -> tuple[Step, ...] | None:
    if include.kind == "include_tasks":
        path = tasks_file(str(args["file"]), ctx, data, key)
        if str(path) in ctx.files:
            return None  # a recursive include: loaded again each time it runs
        return load_tasks(path, include.options, ctx, data, key)
    entry = roles.RoleEntry(name=str(args["name"]), file=getattr(data, "file", ""), line=line_of(data, key) or 0)
    parts = RoleParts(**{part: str(args[part]) for part in ROLE_PARTS if part in args})
    return (role_block(entry, include.options, ctx, parts, dedupe=False).block,)


def load_at_run_time(
    include: Include, args: Mapping[str, Any], task: Task, build_steps: StepsBuilder, build_options: OptionsBuilder
) -> tuple[Step, ...]:
    """What an include loads when it runs with these (rendered) arguments."""
    ctx = Loading(
        build_steps=build_steps,
        build_options=build_options,
        playbook_dir=Path(include.playbook_dir),
        base=Path(include.base_dir),
        role_dir=Path(include.role_dir) if include.role_dir else None,
        files=(task.location.file,),
    )
    where = _Where(task.location.file, task.location.line)
    steps = _load_include(include, args, ctx, where, include.kind)
    return steps or ()


class _Where(dict[str, Any]):
    """A located stand-in for the include task's YAML (errors at run time point at it)."""

    def __init__(self, file: str, line: int):
        super().__init__()
        self.file = file
        self.line = line


# ---- import_playbook -----------------------------------------------------------------
PlaysLoader = Callable[[Path, dict[str, Any], tuple[str, ...]], list[Play]]
IMPORT_PLAYBOOK_KEYS = frozenset({"import_playbook", "ansible.builtin.import_playbook", "name", "vars", "tags", "when"})


def import_playbook(
    item: Any, path: Path, extra: dict[str, Any], stack: tuple[str, ...], load_plays: PlaysLoader
) -> list[Play]:
    key = "import_playbook" if "import_playbook" in item else "ansible.builtin.import_playbook"
    unknown = sorted(set(item) - IMPORT_PLAYBOOK_KEYS)
    if unknown:
        raise _fail(item, unknown[0], f"'{unknown[0]}' is not allowed on import_playbook")
    target = item[key]
    if not isinstance(target, str) or templating.is_template(target):
        raise _fail(item, key, "import_playbook takes a literal file name")
    child = _imported_playbook(item, key, target, path)
    if str(child) in stack or str(child) == str(path):
        raise _fail(item, key, f"import_playbook: '{target}' imports itself")
    if not child.is_file():
        raise _fail(item, key, f"import_playbook: '{target}' not found")
    plays = load_plays(child, extra, stack)
    extra_when = tuple(item["when"]) if isinstance(item.get("when"), list) else (item.get("when"),)
    extra_tags = item.get("tags")
    vars_ = _vars_of(item)
    return [
        _with_import_keywords(play, vars_, tuple(c for c in extra_when if c is not None), extra_tags) for play in plays
    ]


def _imported_playbook(item: Any, key: str, target: str, path: Path) -> Path:
    """A file relative to the importing playbook, or ``ns.coll.name``: a collection's playbook."""
    child = (path.parent / target) if not Path(target).is_absolute() else Path(target)
    fqcn = collections.split_fqcn(target)
    if child.is_file() or fqcn is None:
        return child
    found = collections.playbook_file(*fqcn, path.parent)
    if found is None:
        raise _fail(
            item, key, f"import_playbook: {collections.not_found(fqcn[0], f'playbook {fqcn[1]!r}', path.parent)}"
        )
    return found


def _with_import_keywords(play: Play, vars_: Mapping[str, Any], when: tuple[Any, ...], tags: Any) -> Play:
    if not (vars_ or when or tags):
        return play
    tag_list = tuple(tags) if isinstance(tags, list) else ((tags,) if tags else ())
    return replace(
        play,
        vars={**vars_, **play.vars},
        tasks=tuple(_add_keywords(step, when, tag_list) for step in play.tasks),
        handlers=play.handlers,
    )


def _add_keywords(step: Step, when: tuple[Any, ...], tags: tuple[Any, ...]) -> Step:
    options = replace(step.options, when=when + step.options.when, tags=tags + step.options.tags)
    if isinstance(step, Block):
        return replace(
            step,
            options=options,
            block=tuple(_add_keywords(s, when, tags) for s in step.block),
            rescue=tuple(_add_keywords(s, when, tags) for s in step.rescue),
            always=tuple(_add_keywords(s, when, tags) for s in step.always),
        )
    return replace(step, options=options)
