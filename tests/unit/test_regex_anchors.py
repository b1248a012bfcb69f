"""A regex that checks a whole value ends it with ``\\Z`` (or is used with ``fullmatch``),
never ``$``: ``$`` also matches before a final newline, so `^[a-z0-9-]+$` accepted
``web1\\n`` as a hostname label, and a name checked that way can carry a newline into a
command, a config line or a socket protocol.

Real: the repository's own sources, parsed with ``ast``; the hostname module's validator.
Nothing is faked. Seen red before the anchors were changed (every pattern listed below
that checks a value ended in `$`; hostname took `web1\\n.example.com`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.argvalues import ecma_end_anchors
from engine.errors import TaskFailed

REPO = Path(__file__).resolve().parents[2]
_RE_CALLS = {"compile", "match", "search", "fullmatch"}


def _dollar_anchored(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, pattern) of each re call whose literal pattern ends in an unescaped `$`
    without re.MULTILINE (where `$` means "end of any line", on purpose)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in _RE_CALLS or not isinstance(node.func.value, ast.Name) or node.func.value.id != "re":
            continue
        if not node.args or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
            continue
        pattern = node.args[0].value
        multiline = "MULTILINE" in ast.unparse(node) or "(?m" in pattern
        if pattern.endswith("$") and not pattern.endswith("\\$") and not multiline:
            found.append((node.lineno, pattern))
    return found


def test_no_value_check_in_engine_or_modules_anchors_with_dollar() -> None:
    offenders = []
    for path in sorted([*REPO.glob("engine/**/*.py"), *REPO.glob("modules/**/*.py")]):
        for line, pattern in _dollar_anchored(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(REPO)}:{line}: {pattern!r} (end it with \\Z)")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("name", ["web1\n.example.com", "web1.example.com\n", "web1\n"])
def test_hostname_refuses_a_name_with_a_newline(name: str) -> None:
    from modules.system import hostname

    with pytest.raises(TaskFailed):
        hostname._valid(name)


def test_the_checker_sees_a_dollar_anchor() -> None:
    """The scan itself can fail: it finds `$` and lets `\\Z` and MULTILINE through."""
    code = 're.compile(r"^a$")\nre.compile(r"^a\\Z")\nre.search(r"^a$", t, re.MULTILINE)\nre.match(r"a\\$")\n'
    assert [p for _, p in _dollar_anchored(ast.parse(code))] == ["^a$"]
    assert re.fullmatch(r"^a\Z", "a") and not re.match(r"^a\Z", "a\n")


@pytest.mark.parametrize(
    ("pattern", "python"),
    [
        (r"^[a-z]+$", r"^[a-z]+\Z"),
        (r"^[0-9]+%?$|\{\{", r"^[0-9]+%?\Z|\{\{"),
        (r"^[a-z$]+\$x$", r"^[a-z$]+\$x\Z"),  # a $ in a class or escaped is a dollar sign
        (r"^a", r"^a"),
    ],
)
def test_schema_patterns_end_where_ecma_262_ends_them(pattern: str, python: str) -> None:
    assert ecma_end_anchors(pattern) == python


@pytest.mark.parametrize(
    ("module", "args", "key"),
    [
        ("serve_vllm", {"name": "vllm\n", "model": "m"}, "name"),  # names a unit, a state and a log file
        # HAProxy's admin socket reads one command a line: a newline would start another
        ("lb_backend", {"socket": "/run/haproxy.sock", "backend": "vllm\n", "servers": {"a": "ready"}}, "backend"),
        ("lb_backend", {"socket": "/run/haproxy.sock", "backend": "vllm", "servers": {"a\n": "ready"}}, "servers"),
    ],
)
def test_a_trailing_newline_does_not_pass_a_dollar_anchored_schema_pattern(
    module: str, args: dict[str, Any], key: str
) -> None:
    """JSON Schema's `$` is ECMA-262's: the end of the string. Python's re also matches it
    before a final newline; module arguments are checked with ECMA's meaning (argvalues.py)."""
    errors = [e for e in registry.get(module).validator.iter_errors(args) if list(e.absolute_path) == [key]]
    assert errors and "does not match" in errors[0].message
