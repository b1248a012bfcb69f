"""The rollout end to end: two "hosts" (inventory names reached by the local connection),
each a real vLLM CPU server with the tiny model on its own port, behind a real HAProxy,
with a bounded load generator sending completions through HAProxy during every rollout.
Four releases: one that does not start (a bad flag; it also patches the checkpoint's
config.json, and the rollback must leave the model directory byte for byte as it was),
one that answers differently (another model seed: the golden gate), one that is slower (one sequence at a time: the
performance gate) and a good one. Each bad release stops at the canary and rolls it back
by itself; the good one upgrades every host; HAProxy never answers a request with an error.

Real: vLLM CPU (.venv-vllm), the tiny models (scripts/make_tiny_model.py), HAProxy
(Debian's), the rigger CLI (in the test process), SQLite under the test's state dir.
Nothing is faked. The tests share one fleet (rolloutkit.py) and run in file order (each
start of a server costs 30-90 s on two cores); each says what it proves. Figures (load
counts, gate evidence) are appended to $RIGGER_ROLLOUT_FIGURES when it is set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rolloutkit import BASE_ARGS, Fleet, rollout_under_load, serving_fleet, stopped_at_canary, upgraded_everywhere

from tests.conftest import run_rigger, tree_digest

pytestmark = pytest.mark.slow
# Two hosts: the canary and one batch after it is every path the schedule has (a third host
# repeated the second's turn, ~200 s of CI, and its server crowded the other starts).
HOSTS = ("h1", "h2")


@pytest.fixture(scope="module")
def fleet(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    host_vars = {h: {"ansible_connection": "local"} for h in HOSTS}
    with serving_fleet(tmp_path_factory.mktemp("rollout"), tiny_model, host_vars, run_rigger) as fleet:
        yield fleet


def _rollout(
    fleet: Fleet, label: str, model: Path, extra_args: list[str], rigger: Any, **rollout: Any
) -> tuple[Any, dict[str, Any]]:
    return rollout_under_load(fleet, label, fleet.playbook(label, model, extra_args, **rollout), rigger)


def test_check_mode_shows_the_schedule_and_touches_nothing(fleet: Fleet, rigger: Any) -> None:
    before = {h: fleet.state(h) for h in HOSTS}
    run = rigger("run", str(fleet.playbook("check", fleet.model, [*BASE_ARGS, "--shutdown-timeout", "5"])),
                 "-i", str(fleet.inventory()), "--check", "--diff", timeout_s=600)  # fmt: skip
    assert run.rc == 0, run.stdout[-3000:]
    for line in ("batch 1 (canary): h1", "batch 2: h2", "golden (3 prompts)", "--shutdown-timeout"):
        assert line in run.stdout, run.stdout[-3000:]
    assert {h: fleet.state(h)["pid"] for h in HOSTS} == {h: before[h]["pid"] for h in HOSTS}


def test_a_release_that_does_not_start_is_rolled_back_at_the_canary(fleet: Fleet, rigger: Any) -> None:
    """The release also patches the checkpoint (a key vLLM ignores, in config.json): after
    the rollback the tiny model's files are byte-identical to before, no backup is left, and
    the relaunched server read the bytes its record names."""
    before, files_before = {h: fleet.state(h) for h in HOSTS}, tree_digest(fleet.model)
    patch = {"path": str(fleet.model), "set": {"config.json": {"rigger_release": "does-not-start"}}}
    run, record = _rollout(
        fleet, "does-not-start", fleet.model, [*BASE_ARGS, "--no-such-flag"], rigger, checkpoint_patch=patch
    )
    stopped_at_canary(fleet, run, record, "readiness", before)
    back = record["hosts"][0]["rolled_back"]
    assert back["files"]["restored"] == [str(fleet.model / "config.json")], back
    assert back["files"]["backups_removed"] == [str(fleet.model / "config.json.rigger-orig")], back
    assert back["config_differs"] == [], back
    assert tree_digest(fleet.model) == files_before
    assert not list(fleet.model.glob("*.rigger-orig"))


def test_a_release_that_answers_differently_fails_the_golden_gate(fleet: Fleet, rigger: Any) -> None:
    before = {h: fleet.state(h) for h in HOSTS}
    run, record = _rollout(fleet, "answers-differently", fleet.other_model, BASE_ARGS, rigger)
    stopped_at_canary(fleet, run, record, "golden", before)
    (golden,) = [g for g in record["hosts"][0]["gates"] if g["gate"] == "golden"]
    assert golden["evidence"]["differing"]


def test_a_slower_release_fails_the_performance_gate(fleet: Fleet, rigger: Any) -> None:
    before = {h: fleet.state(h) for h in HOSTS}
    run, record = _rollout(fleet, "slower", fleet.model, [*BASE_ARGS, "--max-num-seqs", "1"], rigger)
    stopped_at_canary(fleet, run, record, "performance", before)


def test_a_good_release_upgrades_every_host(fleet: Fleet, rigger: Any) -> None:
    before = {h: fleet.state(h) for h in HOSTS}
    run, record = _rollout(fleet, "good", fleet.model, [*BASE_ARGS, "--shutdown-timeout", "5"], rigger)
    upgraded_everywhere(fleet, run, record, before, "--shutdown-timeout")
    shown = rigger("show", record["record_file"])
    assert shown.rc == 0 and "batch 1 (canary): h1" in shown.stdout and "gate golden: passed" in shown.stdout
    listed = rigger("baselines", "--output", "json")
    assert {r["host"] for r in json.loads(listed.stdout)} >= set(HOSTS)
