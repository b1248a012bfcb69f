"""The review as one self-contained HTML file: inline CSS, no script, nothing fetched.

INCOMPLETE first when hosts failed while planning, then the host-by-task matrix (hosts
with the same row in one row), then each change once with its per-host table and its
reasons, then what is known only after apply and the failures. Nothing is repeated per
host, so 8 alike hosts take the page of 3."""

from __future__ import annotations

import re

from engine.hosttext import html as escape
from engine.plans.render import MARKS
from engine.plans.review import Column, Group, Review, Row, TaskReview, hosts_text

PLACEHOLDER = re.compile("⟨([a-z0-9_]+)⟩")
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:75em;color:#1d2330;padding:0 1em}
h1{font-size:1.4em}h2{border-bottom:1px solid #ccd;padding-bottom:.2em;margin-top:1.6em}
.meta{color:#667}.task{border:1px solid #d5d9e2;border-radius:6px;padding:.3em 1em;margin:.8em 0}
.task h3{margin:.3em 0}.group{margin:.5em 0}.hosts{font-weight:600}
.incomplete{background:#ffeef0;color:#b31d28;border:2px solid #b31d28;padding:.5em 1em;font-weight:700}
pre{background:#f6f8fa;padding:.5em;overflow-x:auto;margin:.3em 0;font-size:13px}
.del{color:#b31d28;background:#ffeef0;display:block}.add{color:#22863a;background:#f0fff4;display:block}
.hunk{color:#6f42c1;display:block}var{font-style:normal;background:#fff5b1;border-radius:3px;padding:0 .2em}
table{border-collapse:collapse}.per-host code{white-space:nowrap}
td,th{border-bottom:1px solid #eee;padding:.15em .5em;text-align:left}
.matrix td.c{text-align:center;font-family:monospace}.matrix th.n{text-align:center}
.cell-changed{background:#fff5b1;font-weight:600}.cell-failed{background:#ffdce0;color:#b31d28;font-weight:700}
.cell-after{background:#dbedff;color:#0366d6}.cell-skipped{color:#0366d6}.cell-{color:#aaa}
.reason{border-left:3px solid #0366d6;padding-left:.6em;color:#334;margin:.3em 0}
ol.legend{columns:2;font-size:13px;color:#445}code{font-size:13px}
"""


def _line(line: str) -> str:
    kind = "hunk" if line.startswith("--- ") else {"-": "del", "+": "add", "@": "hunk", "~": "hunk"}.get(line[:1])
    # only the factored-out names become markup: [a-z0-9_] between the brackets, no more
    text = PLACEHOLDER.sub(r"<var>\1</var>", escape(line.rstrip("\n")))
    return f'<span class="{kind}">{text}</span>' if kind else text + "\n"


def _pre(lines: tuple[str, ...]) -> str:
    return "<pre>" + "".join(_line(line) for line in lines) + "</pre>"


def _matrix(columns: tuple[Column, ...], rows: tuple[Row, ...]) -> str:
    head = "".join(f'<th class="n" title="{escape(c.task)}">{c.number}</th>' for c in columns)
    body = "".join(
        f'<tr><td class="hosts">{escape(hosts_text(r.hosts))}</td>'
        + "".join(f'<td class="c cell-{c}" title="{escape(c or "not reached")}">{MARKS[c]}</td>' for c in r.cells)
        + "</tr>"
        for r in rows
    )
    legend = "".join(f"<li>{escape(c.task)}</li>" for c in columns)
    return (
        f'<table class="matrix" id="matrix"><tr><th>hosts</th>{head}</tr>{body}</table>'
        '<p class="meta">C changed · A known after apply · F failed · . ok · s skipped · - not reached</p>'
        f'<ol class="legend">{legend}</ol>'
    )


def _table(group: Group) -> str:
    if not group.columns:
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in group.columns)
    rows = "".join(
        f"<tr><td>{escape(h)}</td>" + "".join(f"<td><code>{escape(v)}</code></td>" for v in values) + "</tr>"
        for h, values in zip(group.hosts, group.values, strict=True)
    )
    return f'<table class="per-host"><tr><th>host</th>{head}</tr>{rows}</table>'


def _group(group: Group) -> str:
    reasons = "".join(f'<p class="reason">because: {escape(r)}</p>' for r in group.reasons)
    return (
        f'<div class="group"><span class="hosts">{escape(hosts_text(group.hosts))}</span>'
        f"{_pre(group.lines)}{_table(group)}{reasons}</div>"
    )


def _task(number: int, task: TaskReview) -> str:
    return (
        f'<section class="task" id="task-{number}"><h3>{escape(task.task)}</h3>'
        f'<div class="meta"><code>{escape(task.module)}</code> · <code>{escape(task.location)}</code></div>'
        f"{''.join(_group(g) for g in task.groups)}</section>"
    )


def _later(rev: Review) -> str:
    if not rev.later:
        return ""
    items = "".join(
        f"<li><strong>{escape(x.task)}</strong> on {escape(hosts_text(x.hosts))}: {escape(x.msg)}</li>"
        for x in rev.later
    )
    return f'<h2>Known after apply</h2><ul id="later">{items}</ul>'


def _failed(rev: Review) -> str:
    if not rev.failed:
        return ""
    items = "".join(
        f"<li><strong>{escape(h)}</strong> {escape(t)}: <code>{escape(m[:300])}</code></li>" for h, t, m in rev.failed
    )
    return f'<h2>Failed while planning</h2><ul id="failed">{items}</ul>'


def html(rev: Review) -> str:
    plan = rev.plan
    title = f"rigger plan: {plan.inputs.playbook}"
    incomplete = f'<p class="incomplete">{escape(rev.incomplete)}</p>' if rev.incomplete else ""
    tasks = "".join(_task(n, t) for n, t in enumerate(rev.tasks)) or "<p>Nothing to change.</p>"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>{incomplete}"
        f'<h1>{escape(title)}</h1><p class="summary"><strong>{escape(rev.headline())}</strong></p>'
        f'<p class="meta">{escape(rev.made())}</p>'
        f"<h2>Hosts by task</h2>{_matrix(rev.columns, rev.matrix)}"
        f'<h2>Changes, each once</h2><div id="changes">{tasks}</div>'
        f"{_later(rev)}{_failed(rev)}</body></html>\n"
    )
