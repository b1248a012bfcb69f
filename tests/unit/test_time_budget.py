"""The suite's time budget (tests/time_budget.py, issue 29): what fails and what does not.

Real: the budget's own rule over durations as pytest reports them (node ids with
parameters and xdist's group suffix). No test here is timed.
"""

from __future__ import annotations

from pathlib import Path

from tests.time_budget import ALLOWED, LISTED_SLACK, UNLISTED_LIMIT_S, Allowance, over_budget

REPO = Path(__file__).resolve().parents[2]


def test_an_unlisted_test_over_the_limit_is_named_with_what_to_do() -> None:
    lines = over_budget({"tests/unit/test_x.py::test_slow[a]@tests/unit/test_x.py": UNLISTED_LIMIT_S + 1,
                         "tests/unit/test_x.py::test_quick": UNLISTED_LIMIT_S - 1})  # fmt: skip
    assert len(lines) == 1 and "test_slow[a]" in lines[0] and "tests/time_budget.py" in lines[0]


def test_a_listed_test_may_take_its_bound_but_not_three_times_it() -> None:
    name, allowance = "tests/x.py::test_server", Allowance(40, "starts the module's server")
    allowed = {name: allowance}
    assert over_budget({f"{name}[p]@vllm": allowance.seconds * 2}, allowed) == []
    late = over_budget({name: allowance.seconds * LISTED_SLACK + 1}, allowed)
    assert len(late) == 1 and allowance.reason in late[0] and "find what grew" in late[0]


def test_every_listed_entry_has_a_reason_and_a_bound_above_the_unlisted_limit() -> None:
    for name, allowance in ALLOWED.items():
        assert "[" not in name and (REPO / name.split("::", 1)[0]).exists(), name
        assert allowance.reason.strip() and allowance.seconds > UNLISTED_LIMIT_S, name


def test_a_file_or_folder_entry_covers_every_test_below_it() -> None:
    allowed = {"tests/integration/hub": Allowance(60, "a real hub mirror")}
    assert over_budget({"tests/integration/hub/test_x.py::test_y[1]": 100}, allowed) == []
    assert over_budget({"tests/integration/hubx/test_x.py::test_y": 100}, allowed) != []
