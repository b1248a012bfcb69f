"""Keep secrets out of plan files: secret-named variables are masked wherever their
values appear, and no_log steps are kept only as a slow salted digest.

A value is masked in its common encodings too, because templates make them (``b64encode``,
``to_json``, ``urlencode``): base64 (standard and URL-safe, the secret at any of the three
byte offsets, so it is found inside the base64 of a larger string such as
``user:SECRET``), JSON string escaping and URL encoding (both per character, so they are
found inside a larger encoded string as they are).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SECRET_NAME = re.compile(r"pass(word|wd|phrase)?|secret|token|api[_-]?key|private[_-]?key|credential|auth", re.I)
MIN_SECRET_LEN = 4
# scrypt makes guessing a short secret from its digest slow (a plan file may be shared).
SCRYPT = {"n": 2**12, "r": 8, "p": 1, "dklen": 32}


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)


def _secret_values(variables: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    for name, value in variables.items():
        if isinstance(name, str) and SECRET_NAME.search(name):
            for leaf in _leaves(value):
                if len(leaf) >= MIN_SECRET_LEN and "{{" not in leaf:
                    yield leaf, name
        elif isinstance(value, Mapping):
            yield from _secret_values(value)


MIN_ENCODED_LEN = 6  # shorter cores of a base64 encoding match too much unrelated text


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


def encodings(value: str) -> set[str]:
    """The forms in which ``value`` shows up once a template encodes it (see the module doc)."""
    raw = value.encode("utf-8")
    found = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    found |= {urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value), urllib.parse.quote(value)}
    found |= set(_base64_cores(raw))
    return {form for form in found if form != value and len(form) >= MIN_SECRET_LEN}


@dataclass(frozen=True)
class Scrubber:
    """Replaces known secret values by ``<hidden: NAME>`` in any text of a plan."""

    secrets: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_vars(cls, sources: Iterable[Mapping[str, Any]]) -> Scrubber:
        found: dict[str, str] = {}
        for variables in sources:
            for value, name in _secret_values(variables):
                found.setdefault(value, name)
                for form in encodings(value):
                    found.setdefault(form, name)
        return cls(tuple(sorted(found.items(), key=lambda item: -len(item[0]))))

    def text(self, text: str) -> str:
        for value, name in self.secrets:
            if value in text:
                text = text.replace(value, f"<hidden: {name}>")
        return text

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value


def sealed(salt: bytes, material: Any) -> str:
    """A digest to compare things that may hold secrets, without storing them."""
    blob = json.dumps(material, sort_keys=True, default=str, separators=(",", ":")).encode()
    inner = hashlib.sha256(blob).digest()
    return "scrypt:" + hashlib.scrypt(inner, salt=salt, **SCRYPT).hex()
