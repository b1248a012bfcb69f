"""with_sequence, with_first_found and with_fileglob shaped as ansible-core 2.19's lookups shape them.

Real: engine/playbook/loops.py and files in a temporary folder. The expected sequences
are what ansible-core 2.19.14's sequence lookup returns for the same terms (checked
with a playbook looping `debug: msg="{{ query('sequence', item) }}"` over these terms); the
differential case vars-loops-meta-issue20 compares whole runs against it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.playbook.loops import items


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("start=1 end=5", ["1", "2", "3", "4", "5"]),
        ("count=3", ["1", "2", "3"]),
        ("start=1 count=3 stride=2", ["1", "3", "5"]),
        ("start=0 end=10 stride=3 format=gpu%02d", ["gpu00", "gpu03", "gpu06", "gpu09"]),
        ("4", ["1", "2", "3", "4"]),
        ("2-6/2:x%d", ["x2", "x4", "x6"]),
        ("start=5 end=1 stride=-2", ["5", "3", "1"]),
        ("count=0", []),
    ],
)
def test_sequence(term: str, expected: list[str]) -> None:
    assert items("sequence", term) == expected


@pytest.mark.parametrize(
    ("term", "message"),
    [
        ("start=5 end=1", "to count backwards make stride negative"),
        ("start=1 end=5 count=2", "can't specify both count and end"),
        ("start=1", "must specify count or end"),
        ("end=3 format=%d-%d", "bad formatting string"),
        ("end=3 bogus=1", "can't parse 'bogus=1'"),
        ("0x0a-0x0c", "can't parse '0x0a' as an integer"),
    ],
)
def test_sequence_refusals(term: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        items("sequence", term)


def test_first_found_searches_the_actions_folder_of_the_role_then_the_playbook(tmp_path: Path) -> None:
    role, book = tmp_path / "roles" / "nfs", tmp_path / "book"
    (role / "vars").mkdir(parents=True)
    (book / "files").mkdir(parents=True)
    (role / "vars" / "Debian.yml").write_text("a: 1\n")
    (book / "files" / "default.yml").write_text("a: 2\n")
    where = {"role_path": str(role), "playbook_dir": str(book)}
    found = items("first_found", ["Ubuntu.yml", "Debian.yml", "default.yml"], where, "include_vars")
    assert found == [str(role / "vars" / "Debian.yml")]
    assert items("first_found", ["Debian.yml", "default.yml"], where, "copy") == [str(book / "files" / "default.yml")]
    assert items("first_found", [{"files": ["nope"], "skip": True}], where, "copy") == []
    with pytest.raises(ValueError, match="none of the files was found: nope"):
        items("first_found", ["nope"], where, "copy")


def test_fileglob_matches_files_where_ansible_looks_first(tmp_path: Path) -> None:
    """ansible-core 2.19.14 on the same tree (`with_fileglob` in a play and in a role's tasks):
    a bare pattern matches in the first of role/files, role, playbook/files, playbook where it
    matches anything; a pattern with a folder looks in that folder under files/ or beside it;
    a folder whose name matches is not an item; nothing matched is no item, not an error."""
    book, role = tmp_path / "play", tmp_path / "play" / "roles" / "r"
    for name in ("files/a.conf", "files/b.conf", "files/c.txt", "files/sub/d.conf", "top.conf", "roles/r/files/x.conf"):
        (book / name).parent.mkdir(parents=True, exist_ok=True)
        (book / name).touch()
    (book / "files" / "dir.conf").mkdir()
    play = {"playbook_dir": str(book)}
    found = items("fileglob", ["*.conf", "sub/*.conf", "nothing*"], play)
    assert found == [str(book / "files" / n) for n in ("a.conf", "b.conf", "sub/d.conf")]
    assert items("fileglob", ["*.conf"], {**play, "role_path": str(role)}) == [str(role / "files" / "x.conf")]
    assert items("fileglob", [str(book / "*.conf")], play) == [str(book / "top.conf")]
