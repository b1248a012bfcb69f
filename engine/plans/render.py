"""The review as plain text (a terminal) or markdown (a pull-request comment).

Both lead with INCOMPLETE when hosts failed while planning, then the host-by-task matrix,
then each change once. Markdown stays under GitHub's 65536-character comment limit: the
matrix and the per-host tables show at most ``MAX_ROWS`` rows (hosts with the same row or
change are already one), the rest counted, and whole tasks are cut last, counted too.

Host text goes through the one renderer (engine/hosttext.py). In text, each line rigger
composes is escaped for the terminal, so a segment name holding a newline or an escape
sequence starts no line of its own and erases nothing. In markdown, everything that comes
from a playbook, an inventory or a host (task names, host names, change summaries, process
command lines, segment names, failure messages) is a code span (``md_code``) or inside a
fenced block that its text cannot close (``md_fence``): markdown makes no heading, list,
link or HTML of either, so host data cannot hide a later change from the reviewer.
"""

from __future__ import annotations

from engine.hosttext import md_code as _code
from engine.hosttext import md_fence, terminal_lines
from engine.plans.review import Column, Group, Later, Review, Row, TaskReview, hosts_text, plural

# GitHub refuses comments over 65536 characters: stay well under, and say what was cut.
MARKDOWN_LIMIT = 60_000
LINES_PER_GROUP = 40
MAX_ROWS = 30
MARKS = {"changed": "C", "after": "A", "failed": "F", "ok": ".", "skipped": "s", "": "-"}
LEGEND = "C changed, A known after apply, F failed, . ok, s skipped, - not reached"


def _cut(lines: tuple[str, ...]) -> list[str]:
    shown = list(lines[:LINES_PER_GROUP])
    if len(lines) > LINES_PER_GROUP:
        shown.append(f"… {len(lines) - LINES_PER_GROUP} more lines (the plan file has them all)")
    return shown


def _more_rows(count: int) -> str:
    return f"… {count - MAX_ROWS} more rows (`rigger show PLAN` has them all)"


# ---- text -------------------------------------------------------------------------------


def _text_matrix(columns: tuple[Column, ...], rows: tuple[Row, ...]) -> list[str]:
    names = [", ".join(r.hosts) if len(r.hosts) <= 3 else hosts_text(r.hosts, 3) for r in rows]
    width = max([len(n) for n in names] + [5])
    head = " ".join(f"{c.number:>2}" for c in columns)
    lines = [f"HOSTS x TASKS ({LEGEND})", f"{'':<{width}}  {head}"]
    lines += [
        f"{name:<{width}}  " + " ".join(f"{MARKS[c]:>2}" for c in row.cells)
        for name, row in zip(names, rows, strict=True)
    ]
    return [*lines, *(f"  {c.number:>2} {c.task}" for c in columns), ""]


def _text_group(group: Group) -> list[str]:
    lines = [f"  {hosts_text(group.hosts)}:"]
    lines += [f"      {line}" for line in _cut(group.lines)]
    if group.columns:
        rows = [("host", *group.columns), *((h, *v) for h, v in zip(group.hosts, group.values, strict=True))]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["    per host:"] + [
            "      " + "  ".join(f"{c:<{w}}" for c, w in zip(r, widths, strict=True)) for r in rows
        ]
    lines += [f"    because: {reason}" for reason in group.reasons]
    return lines


def _text_task(task: TaskReview) -> list[str]:
    lines = [f"TASK [{task.task}] ({task.module}, {task.location})"]
    for group in task.groups:
        lines += _text_group(group)
    return [*lines, ""]


def _text_later(later: tuple[Later, ...]) -> list[str]:
    if not later:
        return []
    lines = ["KNOWN AFTER APPLY (apply takes a fresh plan consistent with this review: docs/plans.md)"]
    lines += [f"  [{x.task}] on {hosts_text(x.hosts)}: waits for '{x.depends_on}': {x.msg}" for x in later]
    return [*lines, ""]


def text(rev: Review) -> str:
    plan = rev.plan
    lines = [rev.incomplete] if rev.incomplete else []
    lines += [f"Plan of {plan.inputs.playbook}, {rev.made()}", rev.headline(), ""]
    lines += _text_matrix(rev.columns, rev.matrix)
    for task in rev.tasks:
        lines += _text_task(task)
    lines += _text_later(rev.later)
    if not rev.tasks and not rev.later:
        lines += ["Nothing to change." if not rev.incomplete else "Nothing to change on the hosts that planned.", ""]
    lines += [f"FAILED while planning: [{host}] {task}: {msg}" for host, task, msg in rev.failed]
    return terminal_lines(lines).rstrip() + "\n"


# ---- markdown ---------------------------------------------------------------------------


def _fence(lines: list[str]) -> list[str]:
    return md_fence(lines, "diff")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _markdown_matrix(columns: tuple[Column, ...], rows: tuple[Row, ...]) -> list[str]:
    lines = ["| hosts | " + " | ".join(str(c.number) for c in columns) + " |"]
    lines.append("|---" * (len(columns) + 1) + "|")
    for row in rows[:MAX_ROWS]:
        lines.append(f"| {_cell(_code(hosts_text(row.hosts)))} | " + " | ".join(MARKS[c] for c in row.cells) + " |")
    if len(rows) > MAX_ROWS:
        lines.append(f"| {_more_rows(len(rows))} |")
    legend = "; ".join(f"{c.number} {_code(c.task)}" for c in columns)
    return [*lines, "", f"_{LEGEND}._ Tasks: {legend}", ""]


def _markdown_table(group: Group) -> list[str]:
    lines = ["| host | " + " | ".join(group.columns) + " |", "|---" * (len(group.columns) + 1) + "|"]
    rows = list(zip(group.hosts, group.values, strict=True))
    lines += [
        f"| {_cell(_code(h))} | " + " | ".join(_cell(_code(v)) for v in values) + " |" for h, values in rows[:MAX_ROWS]
    ]
    if len(rows) > MAX_ROWS:
        lines.append(f"| {_more_rows(len(rows))} |")
    return [*lines, ""]


def _markdown_group(group: Group) -> list[str]:
    lines = [_code(hosts_text(group.hosts)), *_fence(_cut(group.lines)), ""]
    if group.columns:
        lines += _markdown_table(group)
    lines += [f"> because: {_code(reason)}" for reason in group.reasons]
    return [*lines, ""] if group.reasons else lines


def _markdown_task(task: TaskReview) -> list[str]:
    lines = [f"#### {_code(task.task)}", f"{_code(task.module)} · {_code(task.location)}", ""]
    for group in task.groups:
        lines += _markdown_group(group)
    return lines


def _markdown_incomplete(rev: Review) -> str:
    """INCOMPLETE first, bold; the host names (host data) as code spans."""
    hosts = rev.plan.failed_hosts
    names = ", ".join(_code(h) for h in hosts[:6]) + (", …" if len(hosts) > 6 else "")
    head = f"INCOMPLETE: {plural(len(hosts), 'host')} failed while planning"
    return f"> **{head}** ({names}): their steps after the failure were not planned"


def markdown(rev: Review) -> str:
    plan = rev.plan
    lines = [_markdown_incomplete(rev), ""] if rev.incomplete else []
    lines += [f"### rigger plan: {_code(plan.inputs.playbook)}", "", f"**{rev.headline()}**", "", f"_{rev.made()}_", ""]
    lines += _markdown_matrix(rev.columns, rev.matrix)
    if not rev.tasks and not rev.later:
        lines += ["Nothing to change.", ""]
    later = [f"- {_code(x.task)} on {_code(hosts_text(x.hosts))}: {_code(x.msg[:300])}" for x in rev.later]
    later = ["#### Known after apply", *later, ""] if later else []
    failed = [f"- **failed** {_code(host)} {_code(task)}: {_code(msg[:300])}" for host, task, msg in rev.failed]
    failed = ["#### Failed while planning", *failed, ""] if failed else []
    used = sum(len(line) + 1 for line in lines + later + failed)
    for number, task in enumerate(rev.tasks):
        block = _markdown_task(task)
        size = sum(len(line) + 1 for line in block)
        if used + size > MARKDOWN_LIMIT:
            lines += [
                f"_… {len(rev.tasks) - number} more tasks cut to fit a comment: `rigger show PLAN` has them._",
                "",
            ]
            break
        lines += block
        used += size
    lines += later + failed
    return "\n".join(lines).rstrip() + "\n"
