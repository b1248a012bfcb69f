"""The pieces of saved plans that need no host: change lines, comparison, secrets, the file.

Real: everything here is the code itself on literal inputs; no host, no mock.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from pathlib import Path

import pytest

from engine.errors import OptionsError, ValidationError
from engine.module_api import Diff
from engine.plans import planfile
from engine.plans.commands import human_duration, parse_age
from engine.plans.compare import differences
from engine.plans.planfile import HostPlan, Inputs, Options, Plan, PlannedDiff, Step
from engine.plans.render import markdown, text
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


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1, "1s"), (0.4, "0.4s"), (90, "1m 30s"), (5400, "1h 30m"), (86400, "1d"), (90061, "1d 1h")],
)
def test_durations_read_as_people_write_them(seconds: float, text: str) -> None:
    """--max-age 1s was shown as '0.000277778 h'."""
    assert human_duration(seconds) == text


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
    assert len(group.hosts) == 8 and group.lines == ("would update /x", "--- /x", "- a", "+ b")
    assert not group.columns, "identical: nothing factored out"
    assert (
        rev.unchanged == 1 and rev.headline() == "9 hosts: 8 changes pending on 8 hosts, 1 host with nothing to change"
    )


def serve_step(n: int) -> Step:
    argv = f"vllm serve /models/gpu{n:03}/Kimi --port {8000 + n} --tensor-parallel-size 8"
    return step(
        task="vLLM serves",
        module="serve_vllm",
        summary="start vLLM (no server recorded)",
        impact=(f"starts kimi on port {8000 + n} with argv {argv}",),
        diffs=(
            PlannedDiff(
                "vLLM argv", "", argv.replace(" --", "\n--") + "\n", tuple(f"+ {a}" for a in argv.split(" --"))
            ),
        ),
    )


def test_a_fleet_review_factors_what_differs_and_fits_a_comment_for_100_hosts() -> None:
    """Pure: the review of a plan (no host). 100 hosts whose starts differ in a path part
    and a port: one change, one per-host table, one matrix row."""
    hosts = tuple(HostPlan(f"gpu{n:03}", (serve_step(n),)) for n in range(1, 101))
    rev = review(a_plan(hosts))
    (task,) = rev.tasks
    (group,) = task.groups
    assert group.columns == ("port", "path"), group.lines
    assert group.values[0] == ("8001", "gpu001")
    assert len(rev.matrix) == 1 and len(rev.matrix[0].hosts) == 100
    shown = markdown(rev)
    assert len(shown) < 65_536, len(shown)
    assert shown.count("vllm serve") == 2, "the argv once (the start line and the argv diff), not per host"
    assert "… 70 more rows" in shown, "the per-host table is cut at 30 rows, the rest counted"


def test_read_only_steps_are_neither_counted_nor_listed_as_changes() -> None:
    hosts = (HostPlan("gpu1", (step(), step(task="bench", module="check_serving", read_only=True))),)
    rev = review(a_plan(hosts))
    assert rev.pending == 1 and [t.task for t in rev.tasks] == ["t"]
    assert "1 change pending" in text(rev)


SECRET = "s3cr3t-Tok+en/=xyz"


@pytest.mark.parametrize(
    "encoded",
    [
        base64.b64encode(SECRET.encode()).decode(),  # {{ api_token | b64encode }}
        base64.b64encode(f"user:{SECRET}".encode()).decode(),  # the secret inside a larger string
        base64.b64encode(f"ab{SECRET}tail".encode()).decode(),
        base64.urlsafe_b64encode(f"x{SECRET}".encode()).decode(),
        json.dumps({"auth": {"key": SECRET + '"'}}),  # {{ {...} | to_json }}
        urllib.parse.urlencode({"key": SECRET, "x": 1}),  # {{ {...} | urlencode }}
        urllib.parse.quote(f"Bearer {SECRET}"),
    ],
)
def test_a_secret_is_masked_in_its_common_encodings_too(encoded: str) -> None:
    """Issue 18: a secret passed through b64encode, to_json or urlencode appeared in the
    plan and `show`. The Scrubber (the one place plan files, show and watch mask) finds it."""
    shown = Scrubber.from_vars([{"api_token": SECRET}]).text(f"header: {encoded}")
    assert "<hidden: api_token>" in shown
    assert SECRET not in shown and urllib.parse.quote(SECRET, safe="") not in shown


HOSTILE = "x\n# Looks like a heading\n<img src=x onerror=alert(1)> [link](https://evil.example) **bold** `tick`"


def test_markdown_review_makes_no_markup_of_host_data() -> None:
    """Issue 18: a /dev/shm segment name or a process argv in the markdown review became
    headings and raw HTML, hiding later changes from a reviewer on a pull request."""
    hostile_step = step(task=f"task {HOSTILE}", summary=f"remove {HOSTILE}")
    rev = review(a_plan((HostPlan(f"gpu1{HOSTILE}", (hostile_step,)),)))
    text = markdown(rev)
    in_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence  # a fenced block's lines are code: markdown makes nothing of them
            continue
        if in_fence:
            assert not line.startswith("```"), line
            continue
        assert not line.startswith("# Looks"), line
        outside = re.sub(r"`[^`\n]*`", "", line)  # code spans: no markup inside them
        assert "<img" not in outside and "](" not in outside and "**bold**" not in outside, line
