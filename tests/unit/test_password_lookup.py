"""The password lookup's file on the controller, and the new list/path filters' errors.

Real: rigger's templating (the sandboxed Jinja environment, the lookup table), the file
system of a temporary folder, passlib (libpass). Nothing is faked; Ansible's own answers
for the same expressions are compared in tests/differential/cases/filters-issue20.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine import templating
from engine.errors import TemplateError


def _lookup(folder: Path, term: str) -> str:
    return str(
        templating.evaluate(f"lookup('password', {term!r})", templating.Scope({"playbook_dir": str(folder)}, {}))
    )


def test_a_new_password_is_written_0600_in_a_0700_folder_and_read_back(tmp_path: Path) -> None:
    first = _lookup(tmp_path, "creds/db length=15")
    path = tmp_path / "creds" / "db"
    assert len(first) == 15
    assert path.read_text() == first + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert _lookup(tmp_path, "creds/db length=30") == first


def test_encrypt_keeps_the_salt_beside_the_password_and_hashes_the_same_way_twice(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("plain\n")
    hashed = _lookup(tmp_path, "pw encrypt=sha512_crypt")
    stored = (tmp_path / "pw").read_text()
    assert stored.startswith("plain salt=") and hashed.startswith("$6$rounds=656000$")
    assert _lookup(tmp_path, "pw encrypt=sha512_crypt") == hashed


def test_a_link_is_neither_read_nor_written(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not a password store\n")
    os.symlink(target, tmp_path / "pw")
    with pytest.raises(TemplateError, match="symbolic link"):
        _lookup(tmp_path, "pw")
    assert target.read_text() == "not a password store\n"


def test_dev_null_writes_nothing_and_seed_repeats(tmp_path: Path) -> None:
    assert _lookup(tmp_path, "/dev/null seed=a length=9") == _lookup(tmp_path, "/dev/null seed=a length=9")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_parameter_is_named(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match=r"unrecognized parameter.*lenght"):
        _lookup(tmp_path, "pw lenght=3")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("'x' | password_hash('sha1')", "sha1 is not in the list"),
        ("[{'a': 1}] | subelements('b')", "could not find 'b'"),
        ("'x' | to_uuid(namespace='nope')", "invalid value 'nope'"),
    ],
)
def test_filters_refuse_bad_input_by_name(expression: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        templating.evaluate(expression, templating.Scope({}, {}))
