"""Ansible's ``password`` lookup: a random password kept in a file on the controller.

``lookup('password', 'credentials/db length=15 chars=ascii_letters,digits')``: the file's
password when it exists, else a new one written there (directories 0700, file 0600, as
Ansible writes them), so the next run gets the same. ``encrypt=sha512_crypt`` returns the
hash and keeps the salt in the file (``PASSWORD salt=SALT``); ``/dev/null`` gives a fresh
password and writes nothing. Like every lookup it runs on the controller, in check mode too
(Ansible writes the file there as well); the host is never touched.
"""

from __future__ import annotations

import os
import random
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.templating.listfilters import SALT_SIZES, password_hash

DEFAULT_LENGTH = 20
DEFAULT_CHARS = ("ascii_letters", "digits", ".,:-_")
PARAMS = frozenset({"length", "encrypt", "chars", "ident", "seed"})
SALT_CHARS = string.ascii_letters + string.digits + "./"


class PasswordLookupError(ValueError):
    """A term the password lookup cannot read (unknown parameter, bad length)."""


def parse_term(term: str) -> tuple[str, dict[str, str]]:
    """(path, parameters) of ``PATH key=value...``; a path may hold spaces before the first pair."""
    words = term.split(" ")
    path_words = []
    while words and "=" not in words[0]:
        path_words.append(words.pop(0))
    params: dict[str, str] = {}
    for word in (w for w in words if w):
        key, sep, value = word.partition("=")
        if not sep:
            raise PasswordLookupError("the 'password' lookup: unrecognized value after key=value parameters")
        params[key] = value
    unknown = sorted(set(params) - PARAMS)
    if unknown:
        raise PasswordLookupError(f"the 'password' lookup: unrecognized parameter(s): {', '.join(unknown)}")
    return " ".join(path_words), params


def candidate_chars(spec: str | None) -> str:
    """``ascii_letters,digits,,``: names of ``string`` constants or literal characters
    (``,,`` is a comma); quotes are never used, as in Ansible."""
    parts = list(DEFAULT_CHARS) if spec is None else [c for c in spec.replace(",,", ",").split(",") if c]
    if spec is not None and ",," in spec:
        parts.append(",")
    chars = "".join(str(getattr(string, part, part)) for part in parts)
    return chars.replace('"', "").replace("'", "")


def random_text(length: int, chars: str, seed: str | None = None) -> str:
    generator = random.Random(seed) if seed is not None else random.SystemRandom()
    return "".join(generator.choice(chars) for _ in range(length))


def _split_content(content: str) -> tuple[str, str | None]:
    password, sep, salt = content.rpartition(" salt=")
    return (password, salt.split(" ident=")[0]) if sep else (content, None)


def _write_new(path: Path, content: str) -> None:
    """Create the file, never through a link and never over one written meanwhile."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content + "\n")


def _rewrite(path: Path, content: str) -> None:
    """Add the salt to an existing file: a new file renamed over it (atomic, no link followed)."""
    temporary = path.with_name(f".{path.name}.rigger-tmp")
    temporary.unlink(missing_ok=True)
    _write_new(temporary, content)
    os.replace(temporary, path)


def password(variables: Mapping[str, Any], terms: list[Any], kw: dict[str, Any]) -> list[Any]:
    found = []
    for term in terms:
        relpath, params = parse_term(str(term))
        params = {**{k: str(v) for k, v in kw.items() if k in PARAMS}, **params}
        try:
            length = int(params.get("length", DEFAULT_LENGTH))
        except ValueError:
            raise PasswordLookupError(
                f"the 'password' lookup: length must be a number, got {params['length']!r}"
            ) from None
        path = Path(relpath)
        if not path.is_absolute():
            path = Path(str(variables.get("playbook_dir", "."))) / path
        discard = str(path) == os.devnull
        if path.is_symlink():
            raise PasswordLookupError(f"the 'password' lookup: {path} is a symbolic link; refusing to read or write it")
        existing = None if discard or not path.exists() else path.read_text(encoding="utf-8").rstrip()
        if existing is None:
            secret, salt = random_text(length, candidate_chars(params.get("chars")), params.get("seed")), None
        else:
            secret, salt = _split_content(existing)
        encrypt = params.get("encrypt")
        if encrypt and salt is None:
            salt = random_text(SALT_SIZES.get(encrypt, 8), SALT_CHARS)
        if not discard and (existing is None or (encrypt and " salt=" not in existing)):
            content = f"{secret} salt={salt}" if encrypt else secret
            (_write_new if existing is None else _rewrite)(path, content)
        found.append(password_hash(secret, encrypt, salt=salt) if encrypt else secret)
    return found
