"""Command lines built from user values: a value is an operand, never an option.

Every module that puts a user's value on a command line goes through ``command_line()``: the
program and rigger's own options first, then ``--`` (every tool rigger runs this way
supports it: apt-get, apt-cache, dpkg-query, pip), then the operands, each checked by
``operand()`` against its grammar. A value that starts with ``-`` is refused, naming the
argument, whatever the grammar says: ``-oDPkg::Pre-Invoke::=CMD`` given as an apt package
would be a root command, ``--index-url=URL`` or ``-r/etc/shadow`` given as a pip
requirement another index or a file read as root. Values that are options by declaration
(pip's ``extra_args``) are the module's business and are documented as such.

May import: engine.errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from engine.errors import TaskFailed

END_OF_OPTIONS = "--"

# Debian policy 5.6.1 (lowercase letters, digits, + - .; two or more, starting alphanumeric),
# with apt's :arch qualifier, then =version or /release.
APT_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:_-]+|/[A-Za-z0-9.+~_-]+)?\Z")
# A PEP 508 requirement: a name (with [extras]), then version specifiers, a URL (@ ...) or
# markers (; ...). Paths and URLs pip also takes are allowed, as long as they are not options.
PIP_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._, -]*\])?|[./~]|[a-z+]+://)")


def operand(value: object, what: str, grammar: re.Pattern[str] | None = None) -> str:
    """``value`` as a command-line operand, or TaskFailed naming ``what`` and why."""
    text = str(value)
    if not text:
        raise TaskFailed(f"{what}: an empty value is not a valid operand")
    if text.startswith("-"):
        raise TaskFailed(
            f"{what}: {text!r} starts with '-', so the program would read it as an option, not as "
            "a value; rigger never passes a value as an option"
        )
    if "\x00" in text or "\n" in text:
        raise TaskFailed(f"{what}: {text!r} holds a NUL byte or a newline")
    if grammar is not None and not grammar.match(text):
        raise TaskFailed(f"{what}: {text!r} is not a valid {_name(grammar)}")
    return text


def operands(values: Iterable[object], what: str, grammar: re.Pattern[str] | None = None) -> list[str]:
    return [operand(value, what, grammar) for value in values]


def command_line(head: Sequence[str], values: Sequence[str]) -> list[str]:
    """``head`` (program, subcommand, rigger's options), ``--``, then the checked operands."""
    return [*head, END_OF_OPTIONS, *values] if values else list(head)


def _name(grammar: re.Pattern[str]) -> str:
    names = {APT_PACKAGE.pattern: "Debian package name", PIP_REQUIREMENT.pattern: "pip requirement"}
    return names.get(grammar.pattern, "value")
