"""Each case under cases/ through real ansible-core 2.19 and through rigger, compared.

Real: ansible-core (its own venv, .venv-ansible, installed by scripts/ci/setup_ansible.sh),
the rigger CLI, the local connection on this machine for every inventory host (both told
so with ``-e ansible_connection=local``). Nothing is faked; the inventory addresses are
never contacted. A case fails on any difference its case.yml does not name with a reason,
and on a named difference that is no longer there (so the notes stay true).
"""

from __future__ import annotations

import pytest
from harness import all_cases, compare, ensure_ansible

CASES = all_cases()


@pytest.fixture(scope="session", autouse=True)
def ansible_installed() -> None:
    ensure_ansible()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rigger_gives_ansibles_answer(case):
    verdict = compare(case)
    assert not verdict.unexpected and not verdict.stale_known, verdict.explain()
