"""Table-driven plan() tests: ``tests/plan_fixtures/<module>/<case>.json`` holds the task's
arguments, the host's recorded answers and what plan() must conclude.

A case file: ``description``; ``args`` (as a playbook gives them: the schema's defaults are
filled in as the executor does); optional ``facts`` and ``vars``; ``host`` (``probes``,
``files``, ``commands`` for ``RecordedHost``); ``expect``, one of
``{"change": summary}`` (with optional ``payload`` / ``diff_labels`` / ``fingerprint``),
``{"unchanged": msg}`` (with optional ``data`` / ``set_vars`` / ``warnings``),
``{"fails": the TaskFailed message}`` or ``{"refused": text}`` (plan tried
to change the host). ``vars.playbook_dir`` (for modules that read controller files) is
relative to the case file's folder, and ``{playbook_dir}`` in an expected message is
that folder. ``peers``: the other hosts a group module reaches (``ctx.peer``),
name -> a recording like ``host``. The recordings come from real hosts (``Recorder``), edited where a
case needs a situation this machine cannot show (8 busy GPUs, another user's process).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from recorded_host import RecordedHost, planning_context

from engine import registry
from engine.module_api import Change, TaskFailed, Unchanged, WriteRefused
from engine.templating import Scope

FIXTURES = Path(__file__).resolve().parent.parent / "plan_fixtures"


def cases(room: str) -> list[Any]:
    """One pytest param per case file of every module of the room."""
    found = []
    for room_package in registry.rooms():
        if room_package.__name__ != f"modules.{room}":
            continue
        for module in room_package.MODULES:
            for path in sorted((FIXTURES / module).glob("*.json")):
                found.append(pytest.param(path, id=f"{module}/{path.stem}"))
    return found


def check(path: Path) -> None:
    case = json.loads(path.read_text(encoding="utf-8"))
    spec = registry.get(path.parent.name)
    args = spec.coerced(case["args"])
    problems = [error.message for error in spec.validator.iter_errors(args)]
    assert not problems, f"{path.name}: invalid args {problems}"
    args = spec.with_defaults(args)
    host = RecordedHost(**case.get("host", {}))
    peers = {name: RecordedHost(**{"host_name": name, **recorded}) for name, recorded in case.get("peers", {}).items()}
    facts = case.get("facts", {})
    variables = dict(case.get("vars", {}))
    if "playbook_dir" in variables:
        variables["playbook_dir"] = str(path.parent / variables["playbook_dir"])
    ctx = planning_context(host, facts, Scope(variables, {"facts": facts}), peers)
    expect = case["expect"]
    if "fails" in expect:
        with pytest.raises(TaskFailed) as failed:
            spec.plan(ctx, args)
        assert failed.value.msg == expect["fails"].replace("{playbook_dir}", variables.get("playbook_dir", ""))
        return
    if "refused" in expect:
        with pytest.raises(WriteRefused, match=expect["refused"]):
            spec.plan(ctx, args)
        return
    outcome = spec.plan(ctx, args)
    if "change" in expect:
        assert isinstance(outcome, Change), f"expected a change, plan() said {outcome!r}"
        assert outcome.summary == expect["change"]
        assert [diff.label for diff in outcome.diffs] == expect.get("diff_labels", [d.label for d in outcome.diffs])
        for key, value in expect.get("payload", {}).items():
            assert outcome.payload[key] == value, key
        if "fingerprint" in expect:
            assert dict(outcome.fingerprint) == expect["fingerprint"]
        return
    assert outcome is None or isinstance(outcome, Unchanged), f"expected no change, plan() said {outcome!r}"
    found = outcome or Unchanged()
    if "unchanged_matches" in expect:  # a message with a measured time in it
        assert re.fullmatch(expect["unchanged_matches"], found.msg), found.msg
    else:
        assert found.msg == expect["unchanged"]
    for key, value in expect.get("data", {}).items():
        assert found.data[key] == value, key
    if "set_vars" in expect:
        assert dict(found.set_vars) == expect["set_vars"]
    if "warnings" in expect:
        assert list(found.warnings) == expect["warnings"]
