"""Jinja2 in a sandbox, strict about undefined names, native types for single expressions.

Trust boundary: strings written by the user (playbook, inventory, ``-e``) are templates
and are rendered lazily when referenced; data that came from a host (facts, registered
results, ``set_fact`` values, loop items) is inert and never rendered again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from engine.errors import TemplateError
from engine.filters import FILTERS, TESTS
from engine.lookups import GLOBALS as LOOKUP_GLOBALS
from engine.sandbox import BoundedSandbox, bound_filters

_SINGLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\{\{|\}\}|\{%).)*)\}\}\s*$", re.DOTALL)
_MARKERS = ("{{", "{%", "{#")


def is_template(value: Any) -> bool:
    return isinstance(value, str) and any(marker in value for marker in _MARKERS)


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
    env.globals.update(LOOKUP_GLOBALS)
    return bound_filters(env)  # engine/sandbox.py: size bounds in front of growing filters


class _Undefined(jinja2.ChainableUndefined, jinja2.StrictUndefined):
    """Strict when used, but ``x.y is defined`` and ``x.y | default(1)`` work with x
    undefined, as in Ansible (the attribute of an undefined is undefined, not an error)."""


_TEXT = _configure(BoundedSandbox(undefined=_Undefined, keep_trailing_newline=True))


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
        raise TemplateError(f"template syntax error in {source!r}: {exc.message}") from None


def check_syntax(value: Any) -> None:
    """Raise TemplateError for the first string in value that is not valid Jinja."""
    if isinstance(value, str) and is_template(value):
        _compile(value, bool(_SINGLE_EXPRESSION.match(value)))
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

    def child(self, data: Mapping[str, Any]) -> Scope:
        """A scope with more inert data on top (loop items, registered results)."""
        if not data:
            return self
        return Scope(self._templated, {**self._data, **data}, self._override, self._pinned)

    def __getitem__(self, key: str) -> Any:
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
        raise KeyError(key)

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

    def __contains__(self, key: object) -> bool:
        return key in self._pinned or key in self._data or key in self._templated or key in _TEXT.globals

    def __iter__(self) -> Iterator[str]:
        yield from dict.fromkeys([*self._templated, *self._data, *self._pinned])

    def __len__(self) -> int:
        return len(set(self._templated) | set(self._data) | set(self._pinned))


def render_text(source: str, scope: Mapping[str, Any]) -> str:
    """A whole template file rendered to text (the ``template`` lookup)."""
    return str(_render_string(source, scope, native=False))


def _render_string(source: str, scope: Mapping[str, Any], native: bool | None = None) -> Any:
    if native is None:
        native = bool(_SINGLE_EXPRESSION.match(source))
    template = _compile(source, native)
    try:
        context = template.new_context(scope, shared=True)  # type: ignore[arg-type]
        rendered = _TEXT.concat(template.root_render_func(context))
        value = context.vars[_RESULT] if native else rendered
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
    from engine.filters import to_bool

    return all(to_bool(evaluate(condition, scope)) for condition in conditions)
