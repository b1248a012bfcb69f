"""``key=value`` task arguments (``debug: msg="hi there"``), split as Ansible splits them.

Tokens are separated by spaces outside quotes and outside ``{{ }}`` / ``{% %}``; the first
``=`` not inside those splits key from value, and quotes around a value are removed.
Tokens without a key stay free text (the command line of ``command``).
"""

from __future__ import annotations

import re

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_OPEN = ("{{", "{%", "{#")
_CLOSE = {"{{": "}}", "{%": "%}", "{#": "#}"}


def split_tokens(text: str) -> list[str]:
    """Split on whitespace that is outside quotes and Jinja blocks; quotes are kept."""
    tokens: list[str] = []
    current: list[str] = []
    quote = ""
    jinja_end = ""
    i = 0
    while i < len(text):
        char = text[i]
        pair = text[i : i + 2]
        if jinja_end:
            current.append(char)
            if pair == jinja_end:
                current.append(text[i + 1])
                i += 1
                jinja_end = ""
        elif quote:
            current.append(char)
            if char == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif char == quote:
                quote = ""
        elif pair in _OPEN:
            jinja_end = _CLOSE[pair]
            current.append(pair)
            i += 1
        elif char in "\"'":
            quote = char
            current.append(char)
        elif char.isspace():
            if current:
                tokens.append("".join(current))
                current = []
        else:
            current.append(char)
        i += 1
    if current:
        tokens.append("".join(current))
    return tokens


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse(text: str, free_form_keys: frozenset[str] | None = None) -> tuple[dict[str, str], str]:
    """(arguments, free text). With ``free_form_keys`` only those keys are taken out of a
    free-form line (``command: ls -l chdir=/tmp``); the rest stays in the free text."""
    args: dict[str, str] = {}
    free: list[str] = []
    for token in split_tokens(text):
        key, sep, value = token.partition("=")
        keyed = bool(sep) and bool(_KEY.match(key))
        if keyed and (free_form_keys is None or key in free_form_keys):
            args[key] = _unquote(value)
        else:
            free.append(token)
    return args, " ".join(free)
