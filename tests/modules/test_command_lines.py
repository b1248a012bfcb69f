"""A user's value on a command line is an operand, never an option (apt, pip, ensure_vllm).

Real: the modules' plan on the local connection (real dpkg-query, apt-get -s, pip), run as
root in a private mount namespace whose /srv is a decoy tmpfs (tests/modules/decoyns.py):
the "secret" a value would make pip read and the file a hook would create are decoys there.
Nothing is faked. Each case only plans: on code that took the value, planning is where it
first reached a program (pip read the file named by `-r...` while planning).
"""

from __future__ import annotations

import pytest
from decoyns import run_in_decoy_namespace

from engine.module_api import APT_PACKAGE, PIP_REQUIREMENT, TaskFailed, command_line, operand

HOOK = "-oDPkg::Pre-Invoke::=touch /srv/pwned"


def _plan(module: str, args: dict[str, object]) -> dict[str, object]:
    body = f"""
    write("/srv/secret", "TOPSECRET-LINE\\n")
    outcome = plan({module!r}, {args!r})
    result = {{"outcome": outcome, "pwned": os.path.exists("/srv/pwned")}}
    """
    return dict(run_in_decoy_namespace(body))


@pytest.mark.parametrize(
    ("module", "args", "named"),
    [
        ("apt", {"name": [HOOK]}, "name"),
        ("apt", {"name": f"sl,{HOOK}"}, "name"),
        ("apt", {"name": ["--allow-unauthenticated"]}, "name"),
        ("pip", {"name": ["-r/srv/secret"]}, "name"),
        ("pip", {"name": ["--index-url=http://127.0.0.1:9/simple"]}, "name"),
        ("pip", {"name": "six,-e/srv"}, "name"),
        ("pip", {"requirements": "--requirement=/srv/secret"}, "requirements"),
    ],
)
def test_a_value_that_starts_with_a_dash_is_refused_naming_the_argument(
    module: str, args: dict[str, object], named: str
) -> None:
    result = _plan(module, args)
    outcome = result["outcome"]
    assert isinstance(outcome, dict) and outcome["status"] == "failed", result
    assert str(outcome["msg"]).startswith(f"{named}: ") and "starts with '-'" in str(outcome["msg"]), result
    assert "TOPSECRET" not in str(outcome["msg"]), "pip read the decoy secret as a requirements file"
    assert not result["pwned"]


@pytest.mark.parametrize(
    ("value", "grammar", "ok"),
    [
        ("sl", APT_PACKAGE, True),
        ("sl=5.02-1+b1", APT_PACKAGE, True),
        ("libc6:amd64", APT_PACKAGE, True),
        ("nginx/bookworm-backports", APT_PACKAGE, True),
        ("sl; touch /tmp/x", APT_PACKAGE, False),
        ("Sl", APT_PACKAGE, False),
        ("six==1.16.0", PIP_REQUIREMENT, True),
        ("vllm[audio]>=0.6", PIP_REQUIREMENT, True),
        ("./wheels/x.whl", PIP_REQUIREMENT, True),
        ("git+https://example.org/x.git", PIP_REQUIREMENT, True),
        ("=six", PIP_REQUIREMENT, False),
    ],
)
def test_operand_grammars(value: str, grammar: object, ok: bool) -> None:
    """The grammars themselves: a wrong value is refused before any program sees it."""
    if ok:
        assert operand(value, "name", grammar) == value  # type: ignore[arg-type]
    else:
        with pytest.raises(TaskFailed, match=r"^name: "):
            operand(value, "name", grammar)  # type: ignore[arg-type]


def test_operands_come_after_end_of_options() -> None:
    assert command_line(["apt-get", "-y", "install"], ["sl"]) == ["apt-get", "-y", "install", "--", "sl"]
    assert command_line(["apt-get", "update"], []) == ["apt-get", "update"]
