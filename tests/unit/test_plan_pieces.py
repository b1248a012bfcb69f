"""The pieces of saved plans that need no host: change lines, comparison, secrets, the file.

Real: everything here is the code itself on literal inputs; no host, no mock.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import OptionsError, ValidationError
from engine.module_api import Diff
from engine.plans import planfile
from engine.plans.commands import parse_age
from engine.plans.compare import differences
from engine.plans.planfile import HostPlan, Inputs, Options, Plan, PlannedDiff, Step
from engine.plans.review import review
from engine.plans.secrets import Scrubber, sealed
from engine.plans.structured import change_lines


def test_json_documents_become_key_paths_and_text_becomes_lines() -> None:
    before = json.dumps({"a": {"kv": 1, "keep": 2}, "b": 1})
    after = json.dumps({"a": {"keep": 2}, "b": 2, "c": 3})
    assert change_lines(Diff("config.json", before, after)) == ["- a.kv", "~ b", "+ c"]
    assert change_lines(Diff("argv", "vllm\n--port 1\n", "vllm\n--port 2\n")) == ["- --port 1", "+ --port 2"]


def step(**fields: object) -> Step:
    base: dict[str, object] = {
        "task": "t",
        "module": "write_file",
        "location": "site.yml:3",
        "status": "changed",
        "planned": "change",
        "summary": "update /x",
        "diffs": (PlannedDiff("/x", "a\n", "b\n", ("- a", "+ b")),),
        "fingerprint": {"file:/x": "sha256:1"},
    }
    return Step(**{**base, **fields})  # type: ignore[arg-type]


def test_differences_name_what_moved() -> None:
    assert differences(step(), step()) == []
    moved = differences(step(), step(fingerprint={"file:/x": "sha256:2", "process:7": "start_time 9"}))
    assert moved == [
        "file:/x: was sha256:1 at the review, now sha256:2",
        "process:7: new since the review (start_time 9)",
    ]
    other = differences(step(), step(diffs=(PlannedDiff("/x", "a\n", "c\n", ("- a", "+ c")),)))
    assert other == ["diff '/x': now also '+ c'; no longer '+ b'"]


def test_files_changed_by_earlier_reviewed_steps_are_known_after_apply() -> None:
    later = step(fingerprint={"file:/x": "sha256:2", "package:vllm": "1"}, diffs=())
    assert differences(step(fingerprint={"file:/x": "sha256:1", "package:vllm": "1"}), later, {"file:/x"}) == []
    assert differences(step(fingerprint={"file:/x": "sha256:1", "package:vllm": "0"}), later, {"file:/x"}) == [
        "package:vllm: was 0 at the review, now 1"
    ]


def test_secret_named_values_are_masked_and_short_or_templated_ones_left() -> None:
    scrub = Scrubber.from_vars([{"db_password": "hunter2x", "port": "8000", "nested": {"api_key": ["k-123456"]}},
                                {"token": "{{ lookup('env', 'T') }}", "secret": "ab"}])  # fmt: skip
    shown = scrub.text("pw=hunter2x key=k-123456 port=8000 label")
    assert shown == "pw=<hidden: db_password> key=<hidden: api_key> port=8000 label"


def test_sealed_digests_depend_on_the_salt_and_hide_the_input() -> None:
    one, two = sealed(b"a" * 16, ["hunter2x"]), sealed(b"b" * 16, ["hunter2x"])
    assert one != two and one == sealed(b"a" * 16, ["hunter2x"]) and "hunter2x" not in one


@pytest.mark.parametrize(("text", "seconds"), [("3600", 3600), ("90m", 5400), ("24h", 86400), ("2d", 172800)])
def test_max_age(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-1h", "0"])
def test_bad_max_age_is_an_options_error(text: str) -> None:
    with pytest.raises(OptionsError, match="--max-age"):
        parse_age(text)


def a_plan(hosts: tuple[HostPlan, ...]) -> Plan:
    return Plan("0", 0.0, "00" * 16, Inputs("site.yml", {}, "", ""), Options(), hosts)


def test_the_plan_file_round_trips_and_bad_files_say_why(tmp_path: Path) -> None:
    plan = a_plan((HostPlan("gpu1", (step(),)),))
    planfile.save(plan, str(tmp_path / "p.json"))
    assert planfile.load(str(tmp_path / "p.json")) == plan
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    with pytest.raises(ValidationError, match="not a rigger plan"):
        planfile.load(str(tmp_path / "bad.json"))
    with pytest.raises(ValidationError, match="plan file not found"):
        planfile.load(str(tmp_path / "missing.json"))
    with pytest.raises(OptionsError, match="cannot write the plan"):
        planfile.save(plan, str(tmp_path / "no-such-dir" / "p.json"))


def test_identical_changes_are_grouped_and_converged_hosts_counted() -> None:
    changing = [HostPlan(f"gpu{n}", (step(),)) for n in range(1, 9)]
    hosts = (*changing, HostPlan("gpu9", (step(planned="unchanged"),)))
    rev = review(a_plan(hosts))
    (task,) = rev.tasks
    (group,) = task.groups
    assert len(group.hosts) == 8 and group.changes == ("- a", "+ b")
    assert (
        rev.unchanged == 1 and rev.headline() == "9 hosts: 8 changes pending on 8 hosts, 1 host with nothing to change"
    )
