"""``key=value`` task arguments (``debug: msg="hi there"``), split as Ansible splits them.

Tokens are separated by spaces outside quotes and outside ``{{ }}`` / ``{% %}``. As in
ansible-core's ``parse_kv``, the key is everything before the first ``=`` that is not
escaped (``\\=``) and not the token's first character, whatever it holds (``daemon-reload``,
``a.b``, ``2x``); quotes around a value are removed. Which keys a module takes is its
schema's business, not the parser's. Tokens without such an ``=`` stay free text (the
command line of ``command``), with ``\\=`` read as ``=`` as Ansible does.
"""

from __future__ import annotations

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


def split_key(token: str) -> tuple[str, str] | None:
    """(key, value) at the first ``=`` past the first character that no backslash escapes;
    None where there is none (free text)."""
    pos = token.find("=", 1)
    while pos > 0 and token[pos - 1] == "\\":
        pos = token.find("=", pos + 1)
    return (token[:pos], token[pos + 1 :]) if pos > 0 else None


def _free_text(token: str) -> str:
    return token.replace("\\=", "=") if "=" in token else token


def parse(text: str, free_form_keys: frozenset[str] | None = None) -> tuple[dict[str, str], str]:
    """(arguments, free text). With ``free_form_keys`` only those keys are taken out of a
    free-form line (``command: ls -l chdir=/tmp``); the rest stays in the free text."""
    args: dict[str, str] = {}
    free: list[str] = []
    for token in split_tokens(text):
        pair = split_key(token)
        if pair is None:
            free.append(_free_text(token))
        elif free_form_keys is None or pair[0] in free_form_keys:
            args[pair[0]] = _unquote(pair[1])
        else:
            free.append(token)
    return args, " ".join(free)
