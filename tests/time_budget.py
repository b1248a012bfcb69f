"""The suite's time budget: the one reviewed place that lists the tests allowed to take
longer than UNLISTED_LIMIT_S, each with its own bound and the reason it needs the time.

CI has 90 minutes on a 2-core machine and must stay within half of that (issue 29). A test
not listed here that takes longer than UNLISTED_LIMIT_S (set-up, call and tear-down
together: a module's shared server is paid by its first test) fails the session with a
message naming it; so does a listed test that takes longer than three times its bound (it
has grown: look at it again). A listed test that now runs quickly is not an error.

Keys are "path::test name" without parameters (every parameter of a test shares its entry).
Figures are from a fresh-clone CI run on the 2-core CI machine (see the closing note of
issue 29); add an entry only with its reason, and prefer making the test faster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UNLISTED_LIMIT_S = 15.0
LISTED_SLACK = 3.0


@dataclass(frozen=True)
class Allowance:
    seconds: float
    reason: str


# path::test -> what it may take and why
ALLOWED: dict[str, Allowance] = {}


def budget_key(nodeid: str) -> str:
    """'tests/x.py::test_y[param]' (or with xdist's '@group' suffix) -> 'tests/x.py::test_y'."""
    return re.sub(r"@[^\[\]]*$", "", nodeid).split("[", 1)[0]


def over_budget(durations: dict[str, float], allowed: dict[str, Allowance] = ALLOWED) -> list[str]:
    """One line per test that took longer than it may, slowest first."""
    lines = []
    for nodeid, seconds in sorted(durations.items(), key=lambda item: -item[1]):
        allowance = allowed.get(budget_key(nodeid))
        if allowance is None and seconds > UNLISTED_LIMIT_S:
            lines.append(
                f"{nodeid} took {seconds:.1f} s (the limit for a test not listed in tests/time_budget.py is "
                f"{UNLISTED_LIMIT_S:.0f} s): make it faster, or list it there with its bound and reason"
            )
        elif allowance is not None and seconds > allowance.seconds * LISTED_SLACK:
            lines.append(
                f"{nodeid} took {seconds:.1f} s, more than {LISTED_SLACK:.0f} x its bound of {allowance.seconds:.0f} s "
                f"in tests/time_budget.py ({allowance.reason}): find what grew"
            )
    return lines
