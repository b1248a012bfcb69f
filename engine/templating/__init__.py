"""Jinja2 in a sandbox, strict about undefined names, native types for single expressions.

Trust boundary: strings written by the user (playbook, inventory, ``-e``) are templates
and are rendered lazily when referenced; data that came from a host (facts, registered
results, ``set_fact`` values, loop items) is inert and never rendered again.

Package ``engine.templating`` owns expressions and variables: this file (the sandboxed
environment, ``render``/``evaluate``/``Scope``), ``filters.py``, ``lookups.py``,
``sandbox.py`` (size bounds), ``magicvars.py``, ``taskvars.py`` (the layered variables one
task sees) and ``extravars.py`` (``-e``). It reads no playbook and touches no host.

May import: engine.errors, engine.yamlload, engine.model, engine.mask, engine.controller_files.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment

from engine.errors import TemplateError
from engine.mask import DECLARED, MASK, answers, is_secret_name, nested_secret_values
from engine.templating.filters import FILTERS, TESTS
from engine.templating.inert import Inert
from engine.templating.lookups import LOOKUPS, jinja_globals, lookup_name, template_lookup
from engine.templating.omit import OMIT
from engine.templating.sandbox import BoundedSandbox, bound_filters

_SINGLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}|\{%).)*)\}\}\s*\Z", re.DOTALL)
_MARKERS = ("{{", "{%", "{#")


def _single_expression(source: str) -> bool:
    """One ``{{ expr }}`` and nothing else: rendered to a native value. Also ``{{ x if c
    else {}}}`` (the mapping's brace against the closing ones, no space), as Ansible reads it."""
    if _SINGLE_EXPRESSION.match(source):
        return True
    text = source.strip()
    inner = text[2:-2]
    return (
        text.startswith("{{")
        and text.endswith("}}}")
        and not any(marker in inner for marker in ("{{", "}}", "{%"))
        and inner.count("{") == inner.count("}")
    )


def is_template(value: Any) -> bool:
    """A string holding template markers; never an ``Inert`` one (inventory or host data)."""
    return isinstance(value, str) and not isinstance(value, Inert) and any(marker in value for marker in _MARKERS)


def contains_template(value: Any) -> bool:
    """Walks plain dicts and lists only: lazy mappings (``hostvars``) are never forced."""
    if isinstance(value, str):
        return is_template(value)
    if isinstance(value, dict):
        return any(contains_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_template(v) for v in value)
    return False


_RESULT = "__rigger_value"


def _configure(env: SandboxedEnvironment) -> SandboxedEnvironment:
    env.filters.update(FILTERS)
    env.tests.update(TESTS)
    # render_text is defined below; the lookup calls it when a template runs, not now
    template = template_lookup(lambda source, scope: render_text(source, scope))
    env.globals.update(jinja_globals({**LOOKUPS, "template": template}))
    env.globals["omit"] = OMIT  # a variable everywhere, as in Ansible (engine/templating/omit.py)
    return bound_filters(env)  # engine/templating/sandbox.py: size bounds in front of growing filters


class _Undefined(jinja2.ChainableUndefined, jinja2.StrictUndefined):
    """Strict when used, but ``x.y is defined`` and ``x.y | default(1)`` work with x
    undefined, as in Ansible (the attribute of an undefined is undefined, not an error)."""

    @property
    def _undefined_message(self) -> str:
        # Ansible's words: "'dict object' has no attribute 'bar'". Jinja names the class,
        # and rigger's values are subclasses that remember file:line (yamlload.LocatedDict).
        found = self._undefined_obj
        kind = next((base.__name__ for base in (dict, list, str) if isinstance(found, base)), None)
        if self._undefined_hint or kind is None:
            return str(super()._undefined_message)
        if not isinstance(self._undefined_name, str):
            return f"{kind} object has no element {self._undefined_name!r}"
        return f"'{kind} object' has no attribute {self._undefined_name!r}"


_OUTPUTS = threading.local()  # the values one text render printed, for _render_string
_TAINT = threading.local()  # the secrets each render on the stack read (innermost last)


def _taint(name: str) -> None:
    """A secret was read: every render on the stack is computed from it."""
    for read in getattr(_TAINT, "stack", []):
        read.append(name)


def _finalize(value: Any) -> Any:
    """Each ``{{ }}`` output of a text template: None prints as nothing (ansible-core 2.19:
    ``"a {{ none }} b"`` is ``"a  b"``, not an extra ``None`` word on a command line)."""
    printed = getattr(_OUTPUTS, "values", None)
    if printed is not None:
        printed.append(value)
    return "" if value is None else value


_TEXT = _configure(BoundedSandbox(undefined=_Undefined, keep_trailing_newline=True, finalize=_finalize))


def environment() -> SandboxedEnvironment:
    """The one Jinja environment: rigger's filters and tests, sandboxed, strict."""
    return _TEXT


def _escape_backslashes(source: str) -> str:
    """As Ansible: a backslash in a string literal inside ``{{ }}`` is kept, so
    ``regex_replace('(\\w+)', '\\1')`` written in YAML reaches re.sub as written."""
    if "\\" not in source or "{{" not in source:
        return source
    pieces, inside = [], False
    try:
        for _line, kind, text in _TEXT.lex(_TEXT.preprocess(source)):
            if kind in ("variable_begin", "variable_end"):
                inside = kind == "variable_begin"
            pieces.append(text.replace("\\", "\\\\") if inside and kind == "string" else text)
    except jinja2.TemplateSyntaxError:
        return source  # reported by the compiler with the original text
    return "".join(pieces)


@lru_cache(maxsize=4096)
def _compile(source: str, native: bool) -> jinja2.Template:
    """A single ``{{ expr }}`` becomes ``{% set %}`` so the value keeps its type."""
    code = _escape_backslashes(source)
    if native:
        match = _SINGLE_EXPRESSION.match(code)
        # no match: braces inside the expression ("x == '{{'"); the parser judges it
        expr = match.group("expr") if match else code.strip()[2:-2]
        code = "{% set " + _RESULT + " = (" + expr + ") %}"
    try:
        return _TEXT.from_string(code)
    except jinja2.TemplateSyntaxError as exc:
        missing = _MISSING_PLUGIN.match(exc.message or "")
        if missing:  # jinja2's "No filter named 'x'.": not a syntax error, a filter rigger lacks
            kind, name = missing.groups()
            raise TemplateError(f"{kind} '{name}' is not available in rigger (in {source!r})") from None
        raise TemplateError(f"template syntax error in {source!r}: {exc.message}") from None


_MISSING_PLUGIN = re.compile(r"^No (filter|test) named '([^']+)'")


def check_syntax(value: Any) -> None:
    """Raise TemplateError for the first string in value that is not valid Jinja."""
    if isinstance(value, str) and is_template(value):
        _compile(value, _single_expression(value))
    elif isinstance(value, Mapping):
        for item in value.values():
            check_syntax(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            check_syntax(item)


def check_condition_syntax(expr: Any) -> None:
    if isinstance(expr, str):
        _compile(_as_expression(expr), True)


def _as_expression(expr: str) -> str:
    stripped = expr.strip()
    if _SINGLE_EXPRESSION.match(stripped):
        return stripped
    return "{{ " + stripped + " }}"


class Scope(Mapping[str, Any]):
    """Variables for one host and one task: user layers rendered lazily, data inert.

    Lookup order: ``pinned`` (an include's loop item, inert), ``override`` (role and
    include parameters, extra vars), then ``data`` (facts, registered results, set_fact,
    loop items), then ``templated`` (role defaults, inventory, play, role and task vars).
    """

    def __init__(
        self,
        templated: Mapping[str, Any],
        data: Mapping[str, Any],
        override: Mapping[str, Any] | None = None,
        pinned: Mapping[str, Any] | None = None,
    ):
        self._templated = {**templated, **(override or {})}
        self._override = override or {}
        self._data = data
        self._pinned = pinned or {}
        self._resolving: set[str] = set()
        self._resolved: dict[str, Any] = {}
        self._checked: set[str] = set()  # names whose value the mask has seen
        self._secret_keys: set[str] = set()

    def child(self, data: Mapping[str, Any]) -> Scope:
        """A scope with more inert data on top (loop items, registered results)."""
        if not data:
            return self
        return Scope(self._templated, {**self._data, **data}, self._override, self._pinned)

    def layered(self, templated: Mapping[str, Any]) -> Scope:
        """A scope with more user-written variables over the templated ones (a vars file
        ``include_vars`` loads): rendered lazily, so they may refer to each other."""
        return Scope({**self._templated, **templated}, self._data, self._override, self._pinned)

    def __getitem__(self, key: str) -> Any:
        value = self._lookup(key)
        if key not in self._checked:
            self._checked.add(key)
            self._secret_keys.update(self._mask(key, value))
        if key in self._secret_keys:
            _taint(key)
        return value

    def _lookup(self, key: str) -> Any:
        if key in self._pinned:
            return self._pinned[key]
        if key in self._override:
            return self._resolve(key)
        if key in self._data:
            return self._data[key]
        if key in self._resolved:
            return self._resolved[key]
        if key in self._templated:
            return self._resolve(key)
        if key in _TEXT.globals:
            return _TEXT.globals[key]
        if key == "vars":  # Ansible's magic ``vars``: every variable in scope, read through this scope
            return ScopeVars(self)
        raise KeyError(key)

    def _declared(self) -> frozenset[str]:
        found = self._templated.get(DECLARED) or self._data.get(DECLARED)
        return frozenset(n for n in found if isinstance(n, str)) if isinstance(found, (list, tuple)) else frozenset()

    def _mask(self, key: str, value: Any) -> set[str]:
        """Record a secret's value, rendered, in the one mask (engine/mask.py); a value that
        holds secret-named keys (``users[0].password``) has those recorded. Host data is
        only looked at when its own name is secret: facts are large and read often."""
        if is_secret_name(key, self._declared()):
            # host data under a secret name (a registered result): what the host answered
            MASK.add(answers(value) if key in self._data else value, key)
            return {key}
        if key in self._data and key not in self._override:
            return set()
        for leaf, name in nested_secret_values(value, self._declared()):
            MASK.add(leaf, name)
        return set()

    def _resolve(self, key: str) -> Any:
        raw = self._templated[key]
        if not contains_template(raw):
            return raw
        if key in self._resolving:
            raise TemplateError(f"variable '{key}' refers to itself")
        self._resolving.add(key)
        try:
            value = render(raw, self)
        finally:
            self._resolving.discard(key)
        self._resolved[key] = value
        return value

    def from_host(self, key: str) -> bool:
        """Whether ``key`` resolves to data (facts, registered results, set_fact values, loop
        items, an include's pinned item) rather than to a variable the user wrote."""
        if key in self._pinned:
            return True
        return key not in self._override and key in self._data

    def __contains__(self, key: object) -> bool:
        scoped = key in self._pinned or key in self._data or key in self._templated
        return scoped or key in _TEXT.globals or key == "vars"

    def __iter__(self) -> Iterator[str]:
        yield from dict.fromkeys([*self._templated, *self._data, *self._pinned])

    def __len__(self) -> int:
        return len(set(self._templated) | set(self._data) | set(self._pinned))


class ScopeVars(Mapping[str, Any]):
    """``vars``: the scope's variables as one mapping (``item in vars``, ``vars[name]``);
    each read goes through the scope, so it renders, masks and marks host data as any read."""

    def __init__(self, scope: Scope):
        self._scope = scope

    def __getitem__(self, key: str) -> Any:
        return self._scope[key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key != "vars" and key in self._scope

    def __iter__(self) -> Iterator[str]:
        return iter(self._scope)

    def __len__(self) -> int:
        return len(self._scope)


class RenderedOnRead(Mapping[str, Any]):
    """``values`` with each template rendered in ``scope`` when first read: a connection
    reads the few ``ansible_*`` settings it needs, and one it never reads may be a
    template that cannot render (Ansible renders them lazily too)."""

    def __init__(self, values: Mapping[str, Any], scope: Mapping[str, Any]):
        self._values = values
        self._scope = scope
        self._rendered: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._rendered:
            raw = self._values[key]
            self._rendered[key] = render(raw, self._scope) if contains_template(raw) else raw
        return self._rendered[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


_EXPRESSION_SEGMENT = re.compile(r"(\{\{.*?\}\})", re.DOTALL)
_UNDEFINED_NAME = re.compile(r"undefined variable: '(\w+)'")


def render_name(source: str, scope: Mapping[str, Any]) -> str:
    """A task or play name as ansible-core 2.19 shows it: rendered, each ``{{ }}`` that reads
    an undefined variable replaced by ``<< error N - 'x' is undefined >>`` (the loop variable
    of a task's banner, for one). Any other error leaves the name as written."""
    try:
        return str(render(source, scope))
    except TemplateError:
        pass
    if "{%" in source:
        return source
    pieces, errors = [], 0
    for piece in _EXPRESSION_SEGMENT.split(source):
        if not _EXPRESSION_SEGMENT.fullmatch(piece):
            pieces.append(piece)
            continue
        try:
            pieces.append(str(_render_string(piece, scope, native=False)))
        except TemplateError as exc:
            undefined = _UNDEFINED_NAME.search(str(exc))
            if undefined is None:
                return source
            errors += 1
            pieces.append(f"<< error {errors} - '{undefined.group(1)}' is undefined >>")
    return "".join(pieces)


def names_in(source: str) -> frozenset[str]:
    """The variable names a template reads (empty for one that does not parse)."""
    try:
        return frozenset(meta.find_undeclared_variables(_TEXT.parse(source)))
    except jinja2.TemplateError:
        return frozenset()


def render_text(source: str, scope: Mapping[str, Any]) -> str:
    """A whole template file rendered to text (the ``template`` lookup)."""
    return str(_render_string(source, scope, native=False))


def _render_string(source: str, scope: Mapping[str, Any], native: bool | None = None) -> Any:
    if native is None:
        native = _single_expression(source)
    template = _compile(source, native)
    stack = getattr(_TAINT, "stack", None)
    if stack is None:
        stack = _TAINT.stack = []
    read: list[str] = []
    stack.append(read)
    try:
        value = _render_compiled(template, source, scope, native)
    finally:
        stack.pop()
    if read and isinstance(value, str):
        MASK.add_derived(value, read[0])  # a string computed from a secret is secret, whatever the filter
    return value


def _render_compiled(template: jinja2.Template, source: str, scope: Mapping[str, Any], native: bool) -> Any:
    try:
        context = template.new_context(scope, shared=True)  # type: ignore[arg-type]
        outer = getattr(_OUTPUTS, "values", None)  # a variable rendered while rendering this
        printed: list[Any] = []
        _OUTPUTS.values = printed
        try:
            rendered = _TEXT.concat(template.root_render_func(context))
        finally:
            _OUTPUTS.values = outer
        value = context.vars[_RESULT] if native else _only_output(rendered, printed)
        if isinstance(value, jinja2.Undefined):
            str(value)
        return value
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"undefined variable: {_explain_undefined(exc)} in {source!r}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"template error in {source!r}: {exc}") from None
    except TemplateError:
        raise
    except Exception as exc:  # a filter raising on bad input is the user's error
        raise TemplateError(f"template error in {source!r}: {type(exc).__name__}: {exc}") from None


def _only_output(rendered: str, printed: list[Any]) -> Any:
    """A text template whose whole output is one printed value keeps that value's type, as
    in ansible-core 2.19: ``{% set d = {} %}{{ d }}`` is a mapping, not the text ``{}``."""
    only = printed[0] if len(printed) == 1 else None
    if only is not None and not isinstance(only, str) and rendered == str(only):
        return only
    return rendered


def _explain_undefined(exc: jinja2.UndefinedError) -> str:
    text = str(exc.message or exc)
    match = re.match(r"'(\w+)' is undefined", text)
    return f"'{match.group(1)}'" if match else text


def render(value: Any, scope: Mapping[str, Any]) -> Any:
    """Render every template string inside value (dicts and lists walked)."""
    if isinstance(value, str):
        return _render_string(value, scope) if is_template(value) else value
    if isinstance(value, dict):
        return {key: render(item, scope) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [render(item, scope) for item in value]
    return value


def evaluate(expr: Any, scope: Mapping[str, Any]) -> Any:
    """Evaluate a bare condition (``when: x > 1``) or a ``{{ }}`` expression."""
    if isinstance(expr, bool):
        return expr
    return _render_string(_as_expression(str(expr)), scope)


def all_true(conditions: tuple[Any, ...], scope: Mapping[str, Any]) -> bool:
    from engine.templating.filters import to_bool

    return all(to_bool(evaluate(condition, scope)) for condition in conditions)


# lookups that read and change nothing on the controller: a secret made with one of them is
# rendered ahead, so its value is masked before any output (``pipe`` runs a command,
# ``password`` may write a file: those secrets are masked once the run renders them)
_PURE_LOOKUPS = frozenset({"env", "file", "vars"})
_LOOKUP_CALL = re.compile(r"\b(?:lookup|query|q)\s*\(\s*(?:'([^']*)'|\"([^\"]*)\"|(.))")


def _pure(source: str) -> bool:
    names = {(m.group(1) or m.group(2) or "?") for m in _LOOKUP_CALL.finditer(source)}
    return {lookup_name(n) for n in names} <= _PURE_LOOKUPS


def record_secrets(variables: Mapping[str, Any]) -> None:
    """Put the secret values of ``variables`` in the one mask, rendered where that is safe
    (literal ones always; templated ones that use only pure lookups); one that cannot render
    here is left for the run, which records it when it renders it."""
    # a variable whose template runs something is left out of the scope, so a secret that
    # reads one (``tok: "{{ raw }}"``, ``raw: "{{ lookup('pipe', ...) }}"``) fails to render here
    pure = {k: v for k, v in variables.items() if not contains_template(v) or _pure(str(v))}
    scope = Scope(pure, {})
    declared = scope._declared()
    for key, value in pure.items():
        if not (is_secret_name(key, declared) or any(nested_secret_values(value, declared))):
            continue
        try:
            scope[key]
        except (TemplateError, KeyError):
            continue
