"""The review as one self-contained HTML file: inline CSS, no script, nothing fetched."""

from __future__ import annotations

from html import escape

from engine.module_api import Diff
from engine.output.console import unified
from engine.plans.planfile import HostPlan, Step
from engine.plans.review import Group, Review, TaskReview, hosts_text, plural

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:75em;color:#1d2330;padding:0 1em}
h1{font-size:1.4em}h2{border-bottom:1px solid #ccd;padding-bottom:.2em;margin-top:2em}
.meta{color:#667}.task,.host{border:1px solid #d5d9e2;border-radius:6px;padding:.4em 1em;margin:1em 0}
.group{margin:.6em 0}.hosts{font-weight:600}.label{font-family:monospace;color:#334}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;margin:.3em 0;font-size:13px}
.del{color:#b31d28;background:#ffeef0;display:block}.add{color:#22863a;background:#f0fff4;display:block}
.hunk{color:#6f42c1;display:block}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #eee;padding:.25em .5em;text-align:left;vertical-align:top}
.status-changed{color:#b08800;font-weight:600}.status-failed,.status-unreachable{color:#b31d28;font-weight:600}
.status-ok{color:#22863a}.status-skipped{color:#0366d6}code{font-size:13px}
"""


def _line(line: str) -> str:
    kind = {"-": "del", "+": "add", "@": "hunk", "~": "hunk"}.get(line[:1])
    text = escape(line.rstrip("\n"))
    return f'<span class="{kind}">{text}</span>' if kind else text + "\n"


def _pre(lines: list[str]) -> str:
    return "<pre>" + "".join(_line(line) for line in lines) + "</pre>"


def _group(group: Group) -> str:
    body = _pre(list(group.changes)) if group.changes else ""
    return (
        f'<div class="group"><span class="hosts">{escape(hosts_text(group.hosts))}</span>: '
        f'<span class="label">{escape(group.label)}</span>{body}</div>'
    )


def _task(number: int, task: TaskReview) -> str:
    summaries = "".join(f"<li>would {escape(g.label)} on {escape(hosts_text(g.hosts))}</li>" for g in task.summaries)
    return (
        f'<section class="task" id="task-{number}"><h3>{escape(task.task)}</h3>'
        f'<div class="meta"><code>{escape(task.module)}</code> · <code>{escape(task.location)}</code></div>'
        f"<ul>{summaries}</ul>{''.join(_group(g) for g in task.groups)}</section>"
    )


def _step_detail(step: Step) -> str:
    diffs = "".join(
        f"<details open><summary>{escape(d.label)}</summary>{_pre(unified(Diff(d.label, d.before, d.after)))}</details>"
        for d in step.diffs
    )
    prints = "".join(
        f"<tr><td><code>{escape(k)}</code></td><td>{escape(v)}</td></tr>" for k, v in step.fingerprint.items()
    )
    table = f"<table><tr><th>depends on</th><th>as planned</th></tr>{prints}</table>" if prints else ""
    return f"<h4>{escape(step.task)}</h4><p>would {escape(step.summary or 'change (no_log)')}</p>{diffs}{table}"


def _host(host: HostPlan) -> str:
    rows = "".join(
        f'<tr><td>{escape(s.task)}</td><td class="status-{escape(s.status)}">{escape(s.status)}</td>'
        f"<td>{escape(s.summary if s.pending else s.msg)}</td></tr>"
        for s in host.steps
    )
    details = "".join(_step_detail(s) for s in host.pending)
    return (
        f'<section class="host" id="host-{escape(host.name)}"><h3>{escape(host.name)}</h3>'
        f"<table><tr><th>task</th><th>status</th><th>what</th></tr>{rows}</table>{details}</section>"
    )


def html(rev: Review) -> str:
    plan = rev.plan
    title = f"rigger plan: {plan.inputs.playbook}"
    tasks = "".join(_task(n, t) for n, t in enumerate(rev.tasks)) or "<p>Nothing to change.</p>"
    shown = [h for h in plan.hosts if h.pending or h.failed]
    hosts = "".join(_host(h) for h in shown)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><p class="summary"><strong>{escape(rev.headline())}</strong></p>'
        f'<p class="meta">{escape(rev.made())}</p>'
        f'<h2>Changes, grouped across hosts</h2><div id="changes">{tasks}</div>'
        f'<h2>Per host</h2><p class="meta">{plural(rev.unchanged, "host")} with nothing to change: not listed.</p>'
        f'<div id="hosts">{hosts}</div></body></html>\n'
    )
