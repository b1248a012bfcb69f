"""The template sandbox refuses to build huge values (engine/templating/sandbox.py), before trying.

Real: Jinja2's sandbox as rigger configures it, rigger's filters. The refusals are
checked before any allocation: on the code before the bound these expressions made the
interpreter allocate gigabytes (or raise MemoryError under a ulimit).
"""

from __future__ import annotations

import pytest

from engine import templating
from engine.errors import TemplateError
from engine.templating.sandbox import MAX_INT_BITS, MAX_SIZE

ALIAS_BOMB = "\n".join(
    [
        "a: &a [1,1,1,1,1,1,1,1,1]",
        *(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip("abcde", "bcdef", strict=True)),
        "g: [*f,*f,*f,*f,*f,*f,*f,*f,*f]",
    ]
)

# values a template cannot spell without backslash escapes (kept literally, as in Ansible)
SCOPE = templating.Scope({}, {"tab": "\t", "newline": "\n", "bomb": ALIAS_BOMB})

HUGE = [
    "'x' * 10**10",
    "10**10 * 'x'",
    "[1] * 10**9",
    "'x' * 10**5 * 10**5",
    "(range(100000) | list) * 100000",
    "10 ** (10 ** 8)",
    "(['x' * 10**6] * 100) | join",
    "(['x' * 10**6] * 100) | join(',')",
    "'x' ~ ('y' * 10**7) ~ ('z' * 10**7)",
    "('x' * 10**7) + ('y' * 10**7)",
    "'%10000000000s' % 'x'",
    "'%*s' % (10**10, 'x')",
    "'%s' | format('x') * 10**10",
    "'%99999999999d' | format(1)",
    "'{:>10000000000}'.format(1)",
    "'{:{w}}'.format(1, w=10**10)",
    "'{a:>99999999999}'.format_map({'a': 1})",
    "'x'.ljust(10**10)",
    "'x'.center(10**10)",
    "'x'.zfill(10**10)",
    "'x' | center(10**10)",
    "(tab * 1000).expandtabs(10**5)",
    "('x' * 10**7).replace('x', 'xx')",
    "('x' * 10**7) | replace('x', 'xx')",
    "(('x' ~ newline) * 10**6) | indent(100)",
    "','.join(['x' * 10**6] * 100)",
    "lipsum(10**7)",
]


@pytest.mark.parametrize("expr", HUGE)
def test_huge_values_are_refused_with_a_clear_error(expr: str) -> None:
    with pytest.raises(TemplateError, match=r"the sandbox allows at most \d+"):
        templating.evaluate(expr, SCOPE)


def test_a_loop_that_doubles_a_string_stops_at_the_bound() -> None:
    source = "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
    with pytest.raises(TemplateError, match=f"a concatenation of {2**24 + 2**24} .* at most {MAX_SIZE}"):
        templating.render(source + "{{ ns.s | length }}", SCOPE)


def test_rendered_output_is_bounded() -> None:
    source = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
    with pytest.raises(TemplateError, match="a rendered template of"):
        templating.render(source, SCOPE)


def test_from_yaml_of_an_alias_bomb_is_refused() -> None:
    with pytest.raises(TemplateError, match="alias bomb"):
        templating.evaluate("bomb | from_yaml", SCOPE)


def test_integer_bound_is_in_bits() -> None:
    assert templating.evaluate("2 ** 1000", SCOPE) == 2**1000
    with pytest.raises(TemplateError, match=f"an integer of .* bits; the sandbox allows at most {MAX_INT_BITS}"):
        templating.evaluate(f"2 ** {MAX_INT_BITS + 1}", SCOPE)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("'ab' * 3", "ababab"),
        ("[0] * 3", [0, 0, 0]),
        ("2 ** 10", 1024),
        ("'a' ~ 'b' ~ 1", "ab1"),
        ("[1, 2] | join(',')", "1,2"),
        ("'-'.join(['a', 'b'])", "a-b"),
        ("'{:>5}'.format(1)", "    1"),
        ("'{:{w}}'.format(1, w=3)", "  1"),
        ("'%5s' % 'x'", "    x"),
        ("'%s-%d' | format('a', 3)", "a-3"),
        ("'a,b' | replace(',', ';')", "a;b"),
        ("'x' | center(5)", "  x  "),
        ("('a' ~ newline ~ 'b') | indent(2)", "a\n  b"),
        ("range(3) | list", [0, 1, 2]),
        ("'a: [1, 2]' | from_yaml", {"a": [1, 2]}),
        ("('x' * 1000) | length", 1000),
    ],
)
def test_ordinary_expressions_still_work(expr: str, expected: object) -> None:
    assert templating.evaluate(expr, SCOPE) == expected
