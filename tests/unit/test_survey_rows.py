"""The survey's rows (tests/differential/survey.py): how a pair of answers is classified.

Real: the survey's classifier on messages rigger and Ansible give (copied from the survey's
own runs over the DeepOps corpus); nothing is run.
"""

from __future__ import annotations

import pytest

from tests.differential.survey import classify


@pytest.mark.parametrize(
    ("ansible_ok", "rigger_ok", "rigger_says", "row"),
    [
        (True, True, "p.yml: valid (1 plays, 21 tasks, 0 hosts in inventory)", "accepted"),
        (
            True,
            False,
            "ERROR: m.yml:8: unknown module or task keyword 'yum' (rigger has no module 'yum'; ...)",
            "refused, named",
        ),
        (
            True,
            False,
            "ERROR: m.yml:10: module 'ansible.builtin.yum' (from ansible.builtin) is not available in rigger",
            "refused, named",
        ),
        (
            True,
            False,
            "ERROR: m.yml:4: `with_random_choice` loops are not supported (write it as `loop:`)",
            "refused, named",
        ),
        (
            True,
            False,
            "ERROR: rc-local.yml:19: unknown module or task keyword 'blockinfile' (did you mean 'lineinfile'?)",
            "refused misleadingly",
        ),
        (
            True,
            False,
            "ERROR: s.yml:6: task 'x' uses undefined variable 'software_remove_packages'",
            "refused misleadingly",
        ),
        (
            True,
            False,
            "ERROR: unexpected error (a bug in rigger): KeyError: 'name'",
            "crash",
        ),
        (False, False, "Traceback (most recent call last):\n  File ...\nKeyError: 'name'", "crash"),
        (False, True, "p.yml: valid", "accepted wrongly"),
        (False, False, "ERROR: unknown module 'docker_login'", "refused by both"),
    ],
)
def test_rows(ansible_ok: bool, rigger_ok: bool, rigger_says: str, row: str) -> None:
    assert classify(ansible_ok, rigger_ok, rigger_says) == row
