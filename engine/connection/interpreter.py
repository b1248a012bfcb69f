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

# a shell metacharacter, a glob or quote character, or a control character (a newline): no
# path or option needs one, and each is a sign of shell text (a quoted space is fine)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BAD_CHAR = re.compile(r"[;|&$`<>(){}\[\]*?!#'\"\\\x00-\x1f\x7f]")


def interpreter_argv(value: object, host: str) -> list[str]:
    """The interpreter as argv; ValidationError naming the host and what is wrong."""
    text = str(value)
    where = f"host {host}: ansible_python_interpreter {text!r}"
    control = _CONTROL.search(text)
    if control:  # a newline would be a second command line to a shell
        raise ValidationError(f"{where} holds the control character {control.group(0)!r}: name the interpreter's path")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValidationError(f"{where} cannot be split into a program and options ({exc})") from None
    if not words:
        raise ValidationError(f"{where} is empty: name the interpreter's path, e.g. /usr/bin/python3")
    for word in words:
        bad = _BAD_CHAR.search(word)
        if bad:
            char = bad.group(0)
            raise ValidationError(
                f"{where} holds {char!r} in {word!r}: it is a program path and its options, never shell "
                "text; name the interpreter's path, e.g. /usr/bin/python3"
            )
    if words[0].startswith("-"):
        raise ValidationError(f"{where} starts with an option: name the interpreter's path first")
    return words
