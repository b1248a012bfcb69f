"""``ansible_python_interpreter`` read as a program and its options, never as shell text.

The value becomes an argv (``shlex.split``): a path or a command name, then options
(``/usr/bin/python3 -X utf8``). A word holding a shell character (``;``, ``|``, ``$``, a
quote left after splitting, a newline) is refused with a message naming the host and the
character: the value is not run by a shell anywhere, so it could only ever be a
misspelled path, and the failure would otherwise surface as an unexplained "not found".
"""

from __future__ import annotations

import re
import shlex

from engine.errors import ValidationError

# what a program path or an option word holds: no shell metacharacter, no whitespace
_WORD = re.compile(r"[A-Za-z0-9_./+,:=@%-]+\Z")
_BAD_CHAR = re.compile(r"[^A-Za-z0-9_./+,:=@%-]")


def interpreter_argv(value: object, host: str) -> list[str]:
    """The interpreter as argv; ValidationError naming the host and what is wrong."""
    text = str(value)
    where = f"host {host}: ansible_python_interpreter {text!r}"
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValidationError(f"{where} cannot be split into a program and options ({exc})") from None
    if not words:
        raise ValidationError(f"{where} is empty: name the interpreter's path, e.g. /usr/bin/python3")
    for word in words:
        if not _WORD.match(word):
            bad = _BAD_CHAR.search(word)
            char = bad.group(0) if bad else word
            raise ValidationError(
                f"{where} holds {char!r} in {word!r}: it is a program path and its options, never shell "
                "text; name the interpreter's path, e.g. /usr/bin/python3"
            )
    if words[0].startswith("-"):
        raise ValidationError(f"{where} starts with an option: name the interpreter's path first")
    return words
