"""The one renderer for text that came from a host, an inventory or a playbook (segment
names, log lines, argv, messages, task and host names): one escaping layer per format.

- terminal: every control character is shown escaped (``\\n``, ``\\r``, ``\\x1b``, the
  Unicode line and paragraph separators, C1 codes, bidi overrides), so host text can never
  start a new line of rigger's output (a segment named ``x\\nok: [localhost]: ...`` forges
  no result line) nor move the cursor or erase lines;
- html: ``html.escape`` with quotes, also control characters escaped as on the terminal;
- markdown: an inline code span (line breaks shown as ``⏎``, backticks as ``'``) or a fenced
  block whose fence is longer than any backtick run inside it, so the text cannot close it.

Callers compose their own lines and pass each piece (or each whole line of their own
making) through here: a line break in the result is always rigger's.

May import: nothing from the engine.
"""

from __future__ import annotations

import html as _html
import re
from collections.abc import Iterable

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 and DEL, C1, line/paragraph separators, bidi embeddings/overrides/isolates, BOM
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _escaped(found: re.Match[str]) -> str:
    char = found.group(0)
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal(text: object) -> str:
    """One line of a terminal: control characters shown escaped, never acted on."""
    value = text if isinstance(text, str) else str(text)
    return _CONTROL.sub(_escaped, value) if _CONTROL.search(value) else value


def terminal_lines(lines: Iterable[str]) -> str:
    """Lines rigger composed, each escaped, joined with rigger's own line breaks."""
    return "\n".join(terminal(line) for line in lines)


def html(text: object) -> str:
    """Text for an HTML element or attribute: no markup, no control character."""
    return _html.escape(terminal(text), quote=True)


_LINE_BREAKS = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def md_code(text: object) -> str:
    """An inline code span: no markup can be made of it, and it holds no line break (a
    line starting with ``#`` after it would be a heading)."""
    value = _LINE_BREAKS.sub("⏎", str(text)).replace("`", "'")
    return "`" + (terminal(value) or " ") + "`"


def md_fence(lines: Iterable[str], info: str = "") -> list[str]:
    """A fenced block of these lines (each may hold breaks: each piece is a line of the
    block), opened and closed by a fence longer than any backtick run in them."""
    body = [terminal(piece) for line in lines for piece in _LINE_BREAKS.split(line)]
    longest = max((len(run) for line in body for run in re.findall("`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *body, fence]
