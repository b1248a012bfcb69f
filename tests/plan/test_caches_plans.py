"""plan() of the caches room's modules, case by case (tests/plan_fixtures/<module>/*.json).

Real: the modules' plan(), the executor's argument handling (coercion, schema defaults),
the scoped connection's planning guard and the probe parser. Not real: the host, a
RecordedHost answering what a real host answered (see tests/fakes/plan_cases.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_cases import cases, check


@pytest.mark.parametrize("case", cases("caches"))
def test_plan(case: Path) -> None:
    check(case)
