"""The survey's corpus (tests/differential/corpus/) is recorded data, never a test.

Real: the corpus folders and corpus/SOURCES.md as committed; nothing is run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "differential" / "corpus"
PERMISSIVE = ("MIT", "BSD-2-Clause", "BSD-3-Clause", "Apache-2.0")
# one row of SOURCES.md's table: | folder/ | repository | commit | licence | what |
ROW = re.compile(r"^\| (?P<folder>[\w.-]+)/ \| (?P<repo>\S+) \| (?P<commit>\S+) \| (?P<licence>[^|]+) \|", re.M)


def _rows() -> list[re.Match[str]]:
    return list(ROW.finditer((CORPUS / "SOURCES.md").read_text()))


@pytest.mark.parametrize("folder", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_every_folder_names_its_source(folder: str) -> None:
    rows = [row for row in _rows() if row["folder"] == folder]
    assert rows, f"corpus/{folder}/ has no row in corpus/SOURCES.md"
    for row in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", row["commit"]), f"{folder}: commit {row['commit']!r} is not a full hash"
        assert row["licence"].startswith(PERMISSIVE), f"{folder}: licence {row['licence']!r} is not permissive"


def test_no_corpus_file_is_collected_as_a_test() -> None:
    """pytest collects test_*.py and *_test.py under tests/: the copied projects' own ones
    would run in CI (they are left out when copying)."""
    collected = [p for p in CORPUS.rglob("*.py") if p.name.startswith("test_") or p.name.endswith("_test.py")]
    assert not collected, f"corpus files pytest would collect: {collected}"
