"""The review as plain text (a terminal) or markdown (a pull-request comment)."""

from __future__ import annotations

from engine.plans.review import Group, Review, TaskReview, hosts_text

# GitHub refuses comments over 65536 characters: stay well under, and say what was cut.
MARKDOWN_LIMIT = 60_000
LINES_PER_GROUP = 40


def _cut(changes: tuple[str, ...]) -> list[str]:
    lines = list(changes[:LINES_PER_GROUP])
    if len(changes) > LINES_PER_GROUP:
        lines.append(f"… {len(changes) - LINES_PER_GROUP} more lines (the plan file has them all)")
    return lines


def _text_group(group: Group) -> list[str]:
    head = f"  {hosts_text(group.hosts)}: {group.label}"
    if len(group.changes) == 1:
        return [f"{head}: {group.changes[0]}"]
    return [f"{head}:" if group.changes else head, *(f"      {line}" for line in _cut(group.changes))]


def _text_task(task: TaskReview) -> list[str]:
    lines = [f"TASK [{task.task}] ({task.module}, {task.location})"]
    lines += [f"  would {g.label} on {hosts_text(g.hosts)}" for g in task.summaries]
    for group in task.groups:
        lines += _text_group(group)
    return [*lines, ""]


def text(rev: Review) -> str:
    plan = rev.plan
    lines = [f"Plan of {plan.inputs.playbook}, {rev.made()}", rev.headline(), ""]
    for task in rev.tasks:
        lines += _text_task(task)
    if not rev.tasks:
        lines += ["Nothing to change.", ""]
    lines += [f"FAILED while planning: [{host}] {task}: {msg}" for host, task, msg in rev.failed]
    return "\n".join(lines).rstrip() + "\n"


def _code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def _fence(lines: list[str]) -> list[str]:
    body = [line.replace("```", "'''") for line in lines]
    return ["```diff", *body, "```"]


def _markdown_group(group: Group) -> list[str]:
    head = f"**{hosts_text(group.hosts)}** · {_code(group.label)}"
    if not group.changes:
        return [head, ""]
    return [head, *_fence(_cut(group.changes)), ""]


def _markdown_task(task: TaskReview) -> list[str]:
    lines = [f"#### {task.task}", f"{_code(task.module)} · {_code(task.location)}", ""]
    lines += [f"- would {g.label} on **{hosts_text(g.hosts)}**" for g in task.summaries]
    lines.append("")
    for group in task.groups:
        lines += _markdown_group(group)
    return lines


def markdown(rev: Review) -> str:
    plan = rev.plan
    lines = [f"### rigger plan: {_code(plan.inputs.playbook)}", "", f"**{rev.headline()}**", "", f"_{rev.made()}_", ""]
    if not rev.tasks:
        lines += ["Nothing to change.", ""]
    footer = [f"- **failed** `{host}` {task}: {_code(msg[:300])}" for host, task, msg in rev.failed]
    used = sum(len(line) + 1 for line in lines + footer)
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
    if footer:
        lines += ["#### Failed while planning", *footer, ""]
    return "\n".join(lines).rstrip() + "\n"
