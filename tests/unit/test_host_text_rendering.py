"""Issue 31: one renderer for host text (engine/hosttext.py), and issue 30: the review counts
hosts, not loop items.

Host text (a /dev/shm segment name, a vLLM log line, a process argv, a change summary) reaches
the terminal escaped (it starts no line of rigger's own and moves no cursor), html escaped,
and markdown inside fences it cannot close; rollout records too.

Real: the console sink, the plan review in its three formats, the rollout record view and the
CLI's `show` of a record written by the real baselines store. Nothing is mocked.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from engine import cli
from engine.baselines import rollout_view
from engine.baselines.store import BaselineStore
from engine.module_api import Diff
from engine.output.console import ConsoleSink
from engine.output.events import HostResult, Notice, Recap, Status, TaskFinished, TaskStarted
from engine.plans.html import html
from engine.plans.planfile import HostPlan, Inputs, Options, Plan, PlannedDiff, Step
from engine.plans.render import markdown, text
from engine.plans.review import review

FORGED = "ok: [localhost]: all is well"
# a newline that would forge a result line, a carriage return and escapes that erase lines
HOSTILE = f"psm_1\n{FORGED}\rX\x1b[1A\x1b[2K\u2028{FORGED}"
MARKUP = '<img src=x onerror="alert(1)">'


def _no_forged_line(output: str) -> None:
    for line in output.split("\n"):
        assert not line.startswith(FORGED), f"a host forged a line: {line!r}"
    assert "\x1b" not in output and "\r" not in output and "\u2028" not in output, repr(output)


def test_the_console_shows_host_text_escaped() -> None:
    out = io.StringIO()
    sink = ConsoleSink(out, colour=False, show_diff=True)
    sink.emit(TaskStarted(name=f"clean {HOSTILE}", module="ensure_shm_clean", location="p.yml:3"))
    result = HostResult(
        host="localhost",
        task="clean",
        status=Status.CHANGED,
        changed=True,
        msg=f"removed /dev/shm/{HOSTILE}",
        warnings=(f"segment {HOSTILE}",),
        item=HOSTILE,
        diffs=(Diff(f"/dev/shm/{HOSTILE}", f"a {HOSTILE}\n", "b\n"),),
    )
    sink.emit(result)
    sink.emit(TaskFinished("clean"))
    sink.emit(Notice("warning", f"host said {HOSTILE}", host="localhost"))
    sink.emit(Recap(stats={"localhost": {"changed": 1}}, duration_s=0.1, check_mode=True, stopped={}))
    shown = out.getvalue()
    _no_forged_line(shown)
    assert "psm_1\\nok: [localhost]" in shown  # escaped, still readable


def _step(**fields: object) -> Step:
    base: dict[str, object] = {
        "task": "t",
        "module": "ensure_shm_clean",
        "location": "site.yml:3",
        "status": "changed",
        "planned": "change",
        "summary": "remove a segment",
        "diffs": (),
        "fingerprint": {},
    }
    return Step(**{**base, **fields})  # type: ignore[arg-type]


def _plan(hosts: tuple[HostPlan, ...]) -> Plan:
    return Plan("0", 0.0, "00" * 16, Inputs("site.yml", {}, "", ""), Options(), hosts)


FENCE_BREAK = "log line\n```\n# Heading outside the fence\n" + MARKUP


def _hostile_review() -> Plan:
    hostile = _step(
        task=f"clean {HOSTILE}",
        summary=f"remove /dev/shm/{HOSTILE}",
        impact=(FENCE_BREAK, f"stops ``` {MARKUP}"),
        diffs=(PlannedDiff("/x", "", "", (f"+ {HOSTILE}", f"+ {FENCE_BREAK}")),),
    )
    return _plan((HostPlan("localhost", (hostile,)),))


def test_the_text_review_shows_host_text_escaped() -> None:
    _no_forged_line(text(review(_hostile_review())))


def _fenced_markup(rendered: str) -> None:
    """Outside fences, no line is a heading or raw html; no fence is closed by host text."""
    fence = ""
    for line in rendered.split("\n"):
        if fence:
            if re.fullmatch("`{" + str(len(fence)) + r",}\s*", line):
                fence = ""
            continue
        opened = re.match(r"(`{3,})", line)
        if opened:
            fence = opened.group(1)
            continue
        assert not line.startswith("# Heading"), line
        outside = re.sub(r"`[^`\n]*`", "", line)
        assert "<img" not in outside, line
    assert not fence, "a fence was left open"


def test_markdown_fences_cannot_be_closed_by_host_text() -> None:
    rendered = markdown(review(_hostile_review()))
    _fenced_markup(rendered)
    assert "\x1b" not in rendered


def test_html_review_escapes_host_text() -> None:
    rendered = html(review(_hostile_review()))
    assert "<img" not in rendered and "\x1b" not in rendered


RECORD = {
    "kind": "rigger-rollout",
    "id": "r-hostile",
    "outcome": "rolled back",
    "gates": ["log"],
    "schedule": [{"batch": 1, "hosts": ["gpu1"], "canary": True}],
    "hosts": [
        {
            "host": "gpu1",
            "outcome": "rolled back",
            "steps": [{"step": "serve", "detail": HOSTILE}],
            "gates": [{"gate": "log", "passed": False, "summary": "fatal", "evidence": {"fatal_line": FENCE_BREAK}}],
        }
    ],
}


def test_a_rollout_record_is_rendered_through_the_one_renderer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rigger show RECORD --format html` printed a vLLM log line's <img onerror> as markup,
    and a multi-line log line broke out of the markdown fence."""
    monkeypatch.setenv("RIGGER_STATE_DIR", str(tmp_path))
    path = BaselineStore(tmp_path / "baselines.sqlite").record_rollout("r-hostile", "rolled back", RECORD)
    shown = {}
    for fmt in ("text", "markdown", "html"):
        cli.exit_code(["show", str(path), "--format", fmt])
        shown[fmt] = capsys.readouterr().out
    _no_forged_line(shown["text"])
    _fenced_markup(shown["markdown"])
    assert "<img" not in shown["html"] and "&lt;img" in shown["html"]
    assert rollout_view.text(RECORD) == shown["text"]


def test_the_review_counts_hosts_not_loop_items() -> None:
    """Issue 30: a loop of 5 items on localhost read "5 hosts (localhost, localhost, ...)"."""
    items = tuple(_step(task="make dirs", summary=f"create /srv/d{n}") for n in range(5))
    other = _step(task="make dirs", summary="create /srv/d0")
    rev = review(_plan((HostPlan("localhost", items), HostPlan("gpu2", (other,)))))
    for rendered in (text(rev), markdown(rev), html(rev)):
        assert "5 hosts" not in rendered and "6 hosts" not in rendered and "localhost, localhost" not in rendered
        assert "2 hosts (localhost, gpu2), 6 items" in rendered


def test_a_segment_name_forges_no_line_of_rigger_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case, for real: a segment in a tmpfs (a folder of /dev/shm) named with a
    newline, a forged result line and an escape that erases the line, planned for removal."""
    import os
    import tempfile

    shm = Path(tempfile.mkdtemp(prefix="rigger-render-", dir="/dev/shm"))
    try:
        segment = shm / f"nccl-x\n{FORGED}\x1b[2K"
        segment.write_text("x")
        os.utime(segment, (1, 1))  # old enough to be a leak
        book = tmp_path / "clean.yml"
        book.write_text(
            "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
            f"    - ensure_shm_clean: {{path: {shm}, patterns: ['nccl-*'], min_age_s: 0}}\n"
        )
        monkeypatch.setenv("NO_COLOR", "1")
        cli.exit_code(["plan", str(book), "-o", str(tmp_path / "p.json")])
        cli.exit_code(["show", str(tmp_path / "p.json")])
        shown = capsys.readouterr()
        assert "nccl-x\\n" in shown.out, shown.out + shown.err  # the segment was planned, shown escaped
        _no_forged_line(shown.out + shown.err)
    finally:
        for entry in shm.iterdir():
            entry.unlink()
        shm.rmdir()
