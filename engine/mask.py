"""The one mask: every secret value rigger has seen, replaced by ``<hidden: NAME>`` in
whatever it writes (terminal, jsonl, plan files, reviews, records, state, errors).

A variable is secret by its name (``SECRET_NAME``: ``*password*``, ``*token*``, ...) or
because the ``rigger_secret_vars`` list names it. Its value is recorded here (each string
leaf, also inside lists and mappings, so ``users[0].password`` is found) when it is first
read, after rendering: ``hf_token: "{{ lookup('env', 'HF_TOKEN') }}"`` is masked by what
the lookup returned. A string rendered from a secret is secret too, whatever the filter
(``'bob:' ~ pw | b64encode``): engine/templating taints each render that read a secret.

A value is masked in its common encodings too, because templates make them (``b64encode``,
``to_json``, ``urlencode``): base64 (standard and URL-safe, the secret at any of the three
byte offsets, so it is found inside the base64 of a larger string such as ``user:SECRET``),
JSON string escaping and URL encoding (both per character, so they are found inside a
larger encoded string as they are); a multi-line secret line by line too.

Why one process-wide registry: an output may be written anywhere (an error raised deep in
a connection, a journal line of watch), and a secret rendered late must still be masked
in what was built from it. The CLI clears it at the start of each command
(``MASK.clear()``) and every output boundary calls ``MASK.text``/``MASK.value``.

May import: nothing from the engine (everything stands on it).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

SECRET_NAME = re.compile(r"pass(word|wd|phrase)?|secret|token|api[_-]?key|private[_-]?key|credential|auth", re.I)
DECLARED = "rigger_secret_vars"  # a list of variable names that are secret whatever they are called
MIN_SECRET_LEN = 4
MIN_ENCODED_LEN = 6  # shorter cores of a base64 encoding match too much unrelated text
MIN_LINE_LEN = 8  # one line of a multi-line secret (a PEM key's body) is masked on its own
# rendered values that read a secret but say nothing of it ("{{ pw is defined }}")
TRIVIAL = frozenset({"True", "False", "None", "true", "false", "null", "none", "yes", "no"})


# A name for where a secret is kept (ansible_ssh_private_key_file, vault_password_file,
# token_path) holds a path, not the secret: shown, as ansible-core shows it.
SECRET_LOCATION = re.compile(r"_(file|files|path|dir)\Z", re.I)


def is_secret_name(name: object, declared: Iterable[str] = ()) -> bool:
    if not isinstance(name, str):
        return False
    return name in declared or (bool(SECRET_NAME.search(name)) and not SECRET_LOCATION.search(name))


def leaves(value: Any) -> Iterable[str]:
    """Plain dicts and lists only: a lazy mapping (``hostvars``) is never forced."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from leaves(item)


def secret_values(variables: Mapping[str, Any], declared: Iterable[str] = ()) -> Iterable[tuple[str, str]]:
    """(value, name) for each secret leaf: secret-named keys at any depth, through lists too."""
    names = frozenset(declared) | frozenset(_declared_in(variables))
    for name, value in variables.items():
        if is_secret_name(name, names):
            yield from ((leaf, str(name)) for leaf in leaves(value) if "{{" not in leaf)
        else:
            yield from nested_secret_values(value, names)


def nested_secret_values(value: Any, declared: Iterable[str] = ()) -> Iterable[tuple[str, str]]:
    if isinstance(value, dict):
        yield from secret_values(value, declared)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from nested_secret_values(item, declared)


def _declared_in(variables: Mapping[str, Any]) -> list[str]:
    found = variables.get(DECLARED) if isinstance(variables, dict) else None
    return [n for n in found if isinstance(n, str)] if isinstance(found, (list, tuple)) else []


def _base64_cores(secret: bytes) -> Iterable[str]:
    """The base64 characters that only the secret's bytes decide, for each offset at which
    it can start in a larger input (0, 1 or 2 bytes into a 3-byte group)."""
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret).decode().rstrip("=")
        first = -(-offset * 8 // 6)  # first character whose 6 bits all come from the secret
        last = (offset + len(secret)) * 8 // 6  # one past the last such character
        core = encoded[first:last]
        if len(core) >= MIN_ENCODED_LEN:
            yield core
            yield core.replace("+", "-").replace("/", "_")


def encodings(value: str, lines: bool = True) -> set[str]:
    """The forms in which ``value`` shows up once a template encodes it (see the module doc)."""
    raw = value.encode("utf-8")
    found = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    found |= {urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value), urllib.parse.quote(value)}
    found |= {urllib.parse.quote_plus(value, safe="/")}
    found |= set(_base64_cores(raw))
    if lines:
        found |= {line.strip() for line in value.splitlines() if len(line.strip()) >= MIN_LINE_LEN}
    return {form for form in found if form != value and len(form) >= MIN_SECRET_LEN}


# what a registered result holds of the host's answer; its other fields are rigger's words
# and the task's own arguments (a host name, "non-zero return code"): masking those would
# hide them all through the run
ANSWER_FIELDS = ("stdout", "stderr", "stdout_lines", "stderr_lines", "content", "value")


def answers(result: Any) -> list[Any]:
    """The host's answer in a registered result (and in each of a loop's results); any
    other value (a set_fact string, list or mapping) whole."""
    if not isinstance(result, dict) or not ({"changed", "failed", "skipped"} & result.keys()):
        return [result]
    entries = [result, *(r for r in result.get("results") or [] if isinstance(r, dict))]
    return [entry.get(name) for entry in entries for name in ANSWER_FIELDS]


class Mask:
    """Secret values (and their encodings) by the name they are shown as; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None

    def clear(self) -> None:
        with self._lock:
            self._names.clear()
            self._pattern = None

    def add(self, value: Any, name: str) -> None:
        """Each string leaf of ``value`` is secret, shown as ``<hidden: name>``."""
        for whole in leaves(value):
            self._add(whole.strip(), name, lines=True)  # the text around it (a newline) stays

    def add_derived(self, value: str, name: str) -> None:
        """A string computed from the secret ``name`` (a template that read it): secret as a
        whole, unless the secret shows in it as it is or in a known encoding (then masking
        that keeps the rest of the text readable: ``cannot log in with <hidden: pw>``).
        Not line by line: a config file rendered from one secret keeps its other lines."""
        leaf = value.strip()
        if self.text(leaf) == leaf:
            self._add(leaf, name, lines=False)

    def _add(self, leaf: str, name: str, lines: bool) -> None:
        if len(leaf) < MIN_SECRET_LEN or leaf in TRIVIAL or leaf in self._names:
            return
        with self._lock:
            for form in (leaf, *encodings(leaf, lines)):
                self._names.setdefault(form, name)
            self._pattern = None

    def add_vars(self, variables: Mapping[str, Any], declared: Iterable[str] = ()) -> None:
        for value, name in secret_values(variables, declared):
            self.add(value, name)

    def _compiled(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._pattern is None and self._names:
                forms = sorted(self._names, key=len, reverse=True)  # the longest form wins
                self._pattern = re.compile("|".join(re.escape(form) for form in forms))
            return self._pattern

    def text(self, text: str) -> str:
        pattern = self._compiled()
        if pattern is None or not text:
            return text
        return pattern.sub(lambda found: f"<hidden: {self._names.get(found.group(0), 'secret')}>", text)

    def value(self, value: Any) -> Any:
        """Every string in a JSON-like value masked (keys are names, kept: a key that happened
        to contain a secret's text, ``admin_user`` beside ``password: admin``, vanished)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value


MASK = Mask()


class MaskedStream:
    """A text stream whose every write goes through the mask: the CLI puts stdout and
    stderr behind one, so no output of a command can bypass it."""

    def __init__(self, stream: TextIO, mask: Mask = MASK):
        self._stream = stream
        self._mask = mask

    def write(self, text: str) -> int:
        masked = self._mask.text(text)
        try:
            self._stream.write(masked)
        except UnicodeEncodeError:  # an ASCII terminal (PYTHONIOENCODING=ascii): say it anyway
            encoding = getattr(self._stream, "encoding", None) or "ascii"
            self._stream.write(masked.encode(encoding, "backslashreplace").decode(encoding))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:  # TextIO's: not a way around the mask
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, fileno ...
        if name == "buffer":  # click writes to the bytes below an ASCII stream: not around the mask
            raise AttributeError(name)
        return getattr(self._stream, name)


def dumps(value: Any, **options: Any) -> str:
    """JSON for a file rigger writes (plan, record, state, journal): each string masked
    before it is encoded, so the file stays valid JSON."""
    return json.dumps(MASK.value(value), **options)
