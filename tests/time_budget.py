"""The suite's time budget: the one reviewed place that lists the tests allowed to take
longer than UNLISTED_LIMIT_S, each with its own bound and the reason it needs the time.

CI has 90 minutes on a 2-core machine and must stay within half of that (issue 29). A test
not listed here that takes longer than UNLISTED_LIMIT_S (set-up, call and tear-down
together: a module's shared server is paid by its first test) fails the session with a
message naming it; so does a listed test that takes longer than three times its bound (it
has grown: look at it again). A listed test that now runs quickly is not an error.

Keys are "path::test name" without parameters (every parameter of a test shares its entry),
or a whole file "path" where every test in it pays for the same real service.
Figures are from a fresh-clone CI run on the 2-core CI machine (see the closing note of
issue 29); add an entry only with its reason, and prefer making the test faster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

UNLISTED_LIMIT_S = 20.0
LISTED_SLACK = 3.0


@dataclass(frozen=True)
class Allowance:
    seconds: float
    reason: str


_VLLM = "starts real vLLM CPU servers (30-90 s a start on two cores)"
_VLLM_SSH = "starts real vLLM CPU servers on loopback hosts over the real sshd"

# path::test (or a file) -> what it may take and why
ALLOWED: dict[str, Allowance] = {
    # The slow tier's vLLM part: each file shares one server (or fleet) per module where it can.
    "tests/integration/vllm/test_rollout.py": Allowance(
        400, _VLLM + ": three hosts, each release's restarts and its gates' load tests"
    ),
    "tests/integration/vllm/test_rollout_ssh.py": Allowance(400, _VLLM_SSH + ": two hosts, a release's restarts"),
    "tests/integration/vllm/test_serve_lifecycle.py": Allowance(200, _VLLM + ": the module's server and its restarts"),
    "tests/integration/vllm/test_serve_wedge.py": Allowance(200, _VLLM + ": the module's server and its restarts"),
    "tests/integration/vllm/test_watch_vllm.py": Allowance(240, _VLLM + ": watch rounds that restart servers"),
    "tests/integration/vllm/test_serve_crash.py": Allowance(200, _VLLM + ": an engine that dies, started per test"),
    "tests/integration/vllm/test_serve_failures.py": Allowance(
        150, _VLLM + ": starts that must fail and one that holds a port"
    ),
    "tests/integration/vllm/test_playbooks.py": Allowance(60, "the Kimi plays in check mode beside real Ray's python"),
    "tests/integration/vllm/test_readme_demo.py": Allowance(
        500, "the README's demo path from a copy: its own .venv by pip, a real vLLM server started, then applied"
    ),
    "tests/integration/vllm/test_serve_ssh.py": Allowance(200, _VLLM_SSH),
    "tests/integration/vllm/test_serve_group_ssh.py": Allowance(300, _VLLM_SSH + ": a two-node gang, restarted"),
    "tests/integration/vllm/test_serve_group_ray.py": Allowance(300, "a real Ray cluster and vLLM's Ray executor"),
    "tests/integration/vllm/test_structured_gate_vllm.py": Allowance(200, _VLLM + ": constrained and free answers"),
    "tests/integration/vllm/test_ensure_vllm.py": Allowance(
        200, "real venvs, pip and `import vllm` in a fresh process (10-30 s each)"
    ),
    "tests/integration/vllm/test_secret_options.py": Allowance(60, "imports vLLM's real argument parser"),
    "tests/integration/test_incident.py": Allowance(
        300, "the Kimi incident replayed with real vLLM processes over sshd"
    ),
    "tests/integration/ssh/test_ssh_ray_cluster.py": Allowance(300, "a real Ray cluster over the real sshd"),
    # The slow tier's services part.
    "tests/differential/test_differential.py": Allowance(
        120, "ansible-playbook (ansible-core 2.19) runs each case: 1-3 s of start-up a run"
    ),
    "tests/integration/test_readme_test_sh.py": Allowance(
        400, "the README's test commands: set-up, a part, collection and the lint stage"
    ),
    "tests/integration/packages": Allowance(120, "real apt and pip installs and removals"),
    "tests/integration/hub": Allowance(120, "a real olah hub mirror and huggingface_hub downloads"),
    "tests/integration/ssh/test_ssh_provision.py": Allowance(
        200, "provisions a loopback host over the real sshd: apt, users, a venv"
    ),
    "tests/integration/ssh": Allowance(
        60, "a real sshd lab per module (keys, users, sshd start) and SSH timeouts, beside the vLLM part"
    ),
    # The fast tier: real processes that take their time on two cores.
    "tests/integration/local/test_plan_review.py": Allowance(40, "a real headless chromium renders the html review"),
    "tests/integration/local/test_plans.py": Allowance(
        40, "real apt-get simulations and pip against a local wheelhouse"
    ),
    "tests/integration/local/test_plan_permissions.py": Allowance(40, "apt's simulation run as an unprivileged user"),
    "tests/integration/local/test_rollout_patched_release.py": Allowance(
        30, "a real HAProxy and stand-in servers under load"
    ),
    "tests/integration/local/test_quarantine.py": Allowance(30, "four-host runs through the real CLI"),
    "tests/integration/local/test_plan_apply_whole.py": Allowance(30, "the Kimi playbook planned and applied whole"),
    "tests/unit/test_readme.py::test_tour_commands_run": Allowance(
        30, "each README command in a process of its own, in a network namespace of its own"
    ),
}


def _allowance(nodeid: str, allowed: dict[str, Allowance]) -> Allowance | None:
    key = budget_key(nodeid)
    path = key.split("::", 1)[0]
    for name in (key, path, *(str(parent) for parent in PurePosixPath(path).parents)):
        if name in allowed:
            return allowed[name]
    return None


def budget_key(nodeid: str) -> str:
    """'tests/x.py::test_y[param]' (or with xdist's '@group' suffix) -> 'tests/x.py::test_y'."""
    return re.sub(r"@[^\[\]]*$", "", nodeid).split("[", 1)[0]


def over_budget(durations: dict[str, float], allowed: dict[str, Allowance] = ALLOWED) -> list[str]:
    """One line per test that took longer than it may, slowest first."""
    lines = []
    for nodeid, seconds in sorted(durations.items(), key=lambda item: -item[1]):
        allowance = _allowance(nodeid, allowed)
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
