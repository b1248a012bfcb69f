"""blockinfile's text edit against what ansible-core 2.19's blockinfile writes.

Real: modules/files/blockinfile.edit. The expected texts were produced by running
ansible-core 2.19.14's blockinfile (.venv-ansible, `ansible localhost -m blockinfile`) on
the same input; nothing is faked. The module's plan() is covered by the plan table
(tests/plan_fixtures/blockinfile) and its write by lineinfile's primitive.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine import registry
from modules.files.blockinfile import edit


def _args(**given: Any) -> dict[str, Any]:
    spec = registry.get("blockinfile")
    return spec.with_defaults({"path": "/x", **given})


M0, M1 = "# BEGIN ANSIBLE MANAGED BLOCK\n", "# END ANSIBLE MANAGED BLOCK\n"
MARKS = {"marker_begin": "B", "marker_end": "E"}
BLANKS = {"prepend_newline": True, "append_newline": True}


@pytest.mark.parametrize(
    ("original", "given", "expected"),
    [
        ("a\nb", {"block": "x"}, f"a\nb\n{M0}x\n{M1}"),
        ("a\nb\n", {"block": "x", "insertbefore": "BOF"}, f"{M0}x\n{M1}a\nb\n"),
        ("a\nb\na\n", {"block": "x", "insertafter": "^a"}, f"a\nb\na\n{M0}x\n{M1}"),
        ("a\nb\nc\n", {"block": "x", "insertbefore": "^b"}, f"a\n{M0}x\n{M1}b\nc\n"),
        ("a\nc\n", {"block": "x", "insertafter": "^nomatch"}, f"a\nc\n{M0}x\n{M1}"),
        (f"a\n{M0}old\n{M1}c\n", {"block": "new\nlines\n"}, f"a\n{M0}new\nlines\n{M1}c\n"),
        (f"a\n{M0}old\n{M1}c\n", {"block": ""}, "a\nc\n"),
        (
            "a\n",
            {"block": "x", "marker": "<!-- {mark} -->", "marker_begin": "B", "marker_end": "E"},
            "a\n<!-- B -->\nx\n<!-- E -->\n",
        ),
        (
            "a\nb\n",
            {"block": "x", "insertafter": "^a", "prepend_newline": True, "append_newline": True},
            f"a\n\n{M0}x\n{M1}\nb\n",
        ),
        (f"{M1}a\n{M0}x\n", {"block": "y"}, f"{M0}y\n{M1}x\n"),
    ],
)
def test_edit_gives_ansibles_text(original: str, given: dict[str, Any], expected: str) -> None:
    assert edit(original, _args(**given)) == expected
