"""The Jinja sandbox with a bound on what an expression may build.

Jinja's SandboxedEnvironment stops attribute escapes and ranges over 100000 items, but an
expression can still ask for ``'x' * 10**10``, ``10 ** 10**9``, ``[s] * n | join``, a
``'%10000000000s'`` format or a loop that doubles a string 40 times: the controller would
try to allocate gigabytes. Expressions may come from anywhere a user can write one, and a
value they work on may come from a host, so every amplifier is checked BEFORE it runs:

- the operators ``*`` (repeat), ``+`` and ``~`` (concatenation), ``**`` (big integers),
  ``%`` (format widths);
- the str methods that grow a string (ljust, rjust, center, zfill, expandtabs, replace,
  join, format) and the filters that do (join, list, center, indent, replace, format,
  from_json; from_yaml parses with rigger's bounded YAML loader: depth, alias bombs);
- the rendered output of a whole template.

Anything over ``MAX_SIZE`` characters or items, or an integer over ``MAX_INT_BITS`` bits,
is refused with a clear error (a TemplateError for the task), never attempted.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

from engine.yamlload import load_text

MAX_SIZE = 16 * 2**20  # characters of a string, items of a list
MAX_INT_BITS = 1 << 16
MAX_LIPSUM_PARAGRAPHS = 100
_GROWING_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs", "replace", "join"})
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")
_FORMAT_NUMBER = re.compile(r"\d+")
_NESTED_FIELD = re.compile(r"\{[^{}]*\{")


class SandboxLimit(SecurityError):
    """An expression would build more than the sandbox allows."""


def _refuse(what: str, size: int, limit: int = MAX_SIZE, unit: str = "characters or items") -> None:
    if size > limit:
        raise SandboxLimit(f"the expression would build {what} of {size} {unit}; the sandbox allows at most {limit}")


def _sized(value: Any) -> bool:
    return isinstance(value, (str, bytes, list, tuple))


def check_repeat(left: Any, right: Any) -> None:
    for seq, times in ((left, right), (right, left)):
        if _sized(seq) and isinstance(times, int) and not isinstance(times, bool):
            _refuse("a repeated sequence", len(seq) * max(times, 0))


def check_power(base: Any, exponent: Any) -> None:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (base, exponent)):
        return
    if exponent > 0 and abs(base) > 1:
        _refuse("an integer", exponent * abs(base).bit_length(), MAX_INT_BITS, "bits")


def check_concat(*parts: Any) -> None:
    _refuse("a concatenation", sum(len(p) if _sized(p) else len(str(p)) for p in parts))


def check_percent(template: Any, args: Any) -> None:
    if not isinstance(template, str):
        return
    values = args if isinstance(args, tuple) else (args,)
    stars = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    for match in _PERCENT_SPEC.finditer(template):
        for field in match.groups():
            if field == "*":
                _refuse("a formatted field", max(stars, default=0))
            elif field:
                _refuse("a formatted field", int(field))


def _check_format_call(template: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    for field in re.findall(r"\{[^{}]*\}", template):
        for number in _FORMAT_NUMBER.findall(field.partition(":")[2]):
            _refuse("a formatted field", int(number))
    for value in (*args, *kwargs.values()):  # nested widths: '{:{w}}'.format(1, w=...)
        if isinstance(value, int) and not isinstance(value, bool) and _NESTED_FIELD.search(template):
            _refuse("a formatted field", value)
    check_concat(template, *args, *kwargs.values())


def bounded_list(value: Any) -> list[Any]:
    """list(value), stopping (with the error) once it passes MAX_SIZE items."""
    items = list(itertools.islice(value, MAX_SIZE + 1)) if not isinstance(value, list) else value
    _refuse("a list", len(items))
    return items


def check_join(separator: str, items: list[Any]) -> None:
    _refuse("a joined string", sum(len(str(i)) for i in items) + len(separator) * max(len(items) - 1, 0))


def check_replace(text: Any, old: Any, new: Any, count: int = -1) -> None:
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return
    hits = text.count(old) if old else len(text) + 1
    hits = hits if count is None or count < 0 else min(hits, count)
    _refuse("a replaced string", len(text) + hits * max(len(new) - len(old), 0))


def _check_method(method: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """Check a growing str method before it runs; returns the (materialized) args."""
    text, name = method.__self__, method.__name__
    if name in ("ljust", "rjust", "center", "zfill") and args and isinstance(args[0], int):
        _refuse("a padded string", args[0])
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        _refuse("a string with tabs expanded", len(text) + text.count("\t") * max(int(size), 0))
    elif name == "replace" and len(args) >= 2:
        check_replace(text, args[0], args[1], *args[2:3])
    elif name == "join" and args:
        items = bounded_list(args[0])
        check_join(text, items)
        return (items, *args[1:])
    return args


class _BoundedCodeGenerator(CodeGenerator):
    """``a ~ b`` goes through the environment's bounded join instead of a bare str join."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(SandboxedEnvironment):
    """SandboxedEnvironment plus the size bounds described in the module docstring."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            check_repeat(left, right)
        elif operator == "**":
            check_power(left, right)
        elif operator == "+" and _sized(left) and _sized(right):
            check_concat(left, right)
        elif operator == "%":
            check_percent(left, right)
        return super().call_binop(context, operator, left, right)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, str) and getattr(obj, "__name__", "") in _GROWING_METHODS:
            args = _check_method(obj, args, kwargs)
        return super().call(context, obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """str.format / format_map reach templates through this wrapper: check first."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        template = str(value.__self__)
        by_map = value.__name__ == "format_map"

        def checked(*args: Any, **kwargs: Any) -> str:
            mapping = args[0] if by_map and args and isinstance(args[0], Mapping) else {}
            _check_format_call(template, () if by_map else args, {**mapping, **kwargs})
            return wrapped(*args, **kwargs)

        return checked

    @staticmethod
    def bounded_concat(parts: Iterable[Any]) -> str:
        texts = [str(part) for part in parts]
        check_concat(*texts)
        return "".join(texts)

    @staticmethod
    def concat(parts: Iterable[str]) -> str:
        """The rendered output of a template, refused once it passes MAX_SIZE."""
        out: list[str] = []
        size = 0
        for part in parts:
            size += len(part)
            _refuse("a rendered template", size)
            out.append(part)
        return "".join(out)


def _bounded_join(value: Any, d: str = "", attribute: Any = None) -> Any:
    items = bounded_list(value)
    shown = [i.get(attribute) if attribute is not None and isinstance(i, Mapping) else i for i in items]
    check_join(str(d), shown)
    return str(d).join(str(i) for i in shown)


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    leading = 1 if hasattr(original, "jinja_pass_arg") else 0  # @pass_eval_context and friends

    def checked(*given: Any, **kwargs: Any) -> Any:
        context, value, args = given[:leading], given[leading], given[leading + 1 :]
        if name == "list":
            return bounded_list(value)
        if name == "center" and args and isinstance(args[0], int):
            _refuse("a padded string", args[0])
        elif name == "indent" and isinstance(value, str):
            width = args[0] if args and isinstance(args[0], int) else kwargs.get("width", 4)
            width = width if isinstance(width, int) else len(str(width))
            _refuse("an indented string", len(value) + (value.count("\n") + 1) * max(width, 0))
        elif name == "replace" and len(args) >= 2:
            check_replace(value, args[0], args[1], *args[2:3])
        elif name == "format":
            check_percent(value, args)
        elif name == "from_json" and _sized(value):
            _refuse("a parsed document (its text)", len(value))
        elif name == "from_yaml" and isinstance(value, str):
            _refuse("a parsed document (its text)", len(value))
            return load_text(value, "from_yaml input")  # depth and alias-bomb bounds
        return original(*context, value, *args, **kwargs)

    checked.__name__ = getattr(original, "__name__", name)
    if leading:
        checked.jinja_pass_arg = original.jinja_pass_arg  # type: ignore[attr-defined]
    return checked


_WRAPPED_FILTERS = ("list", "center", "indent", "replace", "format", "from_json", "from_yaml")


def bound_filters(env: SandboxedEnvironment) -> SandboxedEnvironment:
    """Put the size checks in front of the filters (and globals) that can grow a value."""
    env.filters["join"] = _bounded_join
    for name in _WRAPPED_FILTERS:
        if name in env.filters:
            env.filters[name] = _wrap(name, env.filters[name])
    lipsum = env.globals.get("lipsum")
    if callable(lipsum):

        def bounded_lipsum(n: int = 5, *args: Any, **kwargs: Any) -> Any:
            _refuse("lorem ipsum", int(n), MAX_LIPSUM_PARAGRAPHS, "paragraphs")
            return lipsum(n, *args, **kwargs)

        env.globals["lipsum"] = bounded_lipsum
    return env
